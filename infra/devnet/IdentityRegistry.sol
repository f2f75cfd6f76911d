// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ERC721} from "@openzeppelin/contracts/token/ERC721/ERC721.sol";
import {ERC721URIStorage} from "@openzeppelin/contracts/token/ERC721/extensions/ERC721URIStorage.sol";

/// ERC-8004 (Trustless Agents) Identity Registry, written from the ERC's text for local
/// chains: an agent is an ERC-721 token whose URI is its registration file; its owner
/// (or an operator the owner approved) acts for it, in the Validation Registry too.
/// The parts Umpire's validator reads: `register`, `ownerOf`, `getApproved`,
/// `isApprovedForAll`, `tokenURI`. On-chain metadata and the agent wallet are left out.
contract IdentityRegistry is ERC721URIStorage {
    /// The last agent id handed out; ids start at 1.
    uint256 public lastAgentId;

    event Registered(uint256 indexed agentId, string agentURI, address indexed owner);
    event URIUpdated(uint256 indexed agentId, string newURI, address indexed updatedBy);

    error NotAuthorized(address caller);

    constructor() ERC721("AgentIdentity", "AGENT") {}

    function register() external returns (uint256 agentId) {
        return _register("");
    }

    function register(string calldata agentURI) external returns (uint256 agentId) {
        return _register(agentURI);
    }

    function setAgentURI(uint256 agentId, string calldata newURI) external {
        if (!_isAuthorized(_requireOwned(agentId), msg.sender, agentId)) revert NotAuthorized(msg.sender);
        _setTokenURI(agentId, newURI);
        emit URIUpdated(agentId, newURI, msg.sender);
    }

    /// Whether `spender` may act for the agent (its owner or an approved operator).
    function isAuthorizedOrOwner(address spender, uint256 agentId) external view returns (bool) {
        return _isAuthorized(_requireOwned(agentId), spender, agentId);
    }

    function _register(string memory agentURI) private returns (uint256 agentId) {
        agentId = ++lastAgentId;
        _safeMint(msg.sender, agentId);
        if (bytes(agentURI).length > 0) _setTokenURI(agentId, agentURI);
        emit Registered(agentId, agentURI, msg.sender);
    }
}
