// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// The Identity Registry as the Validation Registry asks it who may act for an agent.
interface IAgentIdentity {
    function ownerOf(uint256 agentId) external view returns (address);
    function getApproved(uint256 agentId) external view returns (address);
    function isApprovedForAll(address owner, address operator) external view returns (bool);
}

/// ERC-8004 (Trustless Agents) Validation Registry, written from the ERC's text and the
/// public interface of its reference implementation, for local chains. An agent's owner
/// (or approved operator) asks a named validator to check a piece of its work
/// (`validationRequest`, one request per `requestHash`); only that validator answers
/// (`validationResponse`, 0-100, repeatable: a later answer, told apart by its `tag`,
/// replaces the status, and every answer stays in the events).
contract ValidationRegistry {
    struct ValidationStatus {
        address validatorAddress;
        uint256 agentId;
        uint8 response;
        bytes32 responseHash;
        string tag;
        uint256 lastUpdate;
        bool hasResponse;
    }

    IAgentIdentity public immutable identityRegistry;
    mapping(bytes32 => ValidationStatus) private _validations;
    mapping(uint256 => bytes32[]) private _agentValidations;
    mapping(address => bytes32[]) private _validatorRequests;

    event ValidationRequest(
        address indexed validatorAddress, uint256 indexed agentId, string requestURI, bytes32 indexed requestHash
    );
    event ValidationResponse(
        address indexed validatorAddress,
        uint256 indexed agentId,
        bytes32 indexed requestHash,
        uint8 response,
        string responseURI,
        bytes32 responseHash,
        string tag
    );

    error ZeroAddress();
    error RequestExists(bytes32 requestHash);
    error UnknownRequest(bytes32 requestHash);
    error NotAuthorized(address caller);
    error NotTheValidator(address caller, address validator);
    error ResponseOutOfRange(uint8 response);

    constructor(IAgentIdentity identity) {
        if (address(identity) == address(0)) revert ZeroAddress();
        identityRegistry = identity;
    }

    function getIdentityRegistry() external view returns (address) {
        return address(identityRegistry);
    }

    function validationRequest(
        address validatorAddress,
        uint256 agentId,
        string calldata requestURI,
        bytes32 requestHash
    ) external {
        if (validatorAddress == address(0)) revert ZeroAddress();
        if (_validations[requestHash].validatorAddress != address(0)) revert RequestExists(requestHash);
        address owner = identityRegistry.ownerOf(agentId);
        bool allowed = msg.sender == owner || identityRegistry.isApprovedForAll(owner, msg.sender)
            || identityRegistry.getApproved(agentId) == msg.sender;
        if (!allowed) revert NotAuthorized(msg.sender);
        ValidationStatus storage s = _validations[requestHash];
        s.validatorAddress = validatorAddress;
        s.agentId = agentId;
        s.lastUpdate = block.timestamp;
        _agentValidations[agentId].push(requestHash);
        _validatorRequests[validatorAddress].push(requestHash);
        emit ValidationRequest(validatorAddress, agentId, requestURI, requestHash);
    }

    function validationResponse(
        bytes32 requestHash,
        uint8 response,
        string calldata responseURI,
        bytes32 responseHash,
        string calldata tag
    ) external {
        ValidationStatus storage s = _validations[requestHash];
        if (s.validatorAddress == address(0)) revert UnknownRequest(requestHash);
        if (msg.sender != s.validatorAddress) revert NotTheValidator(msg.sender, s.validatorAddress);
        if (response > 100) revert ResponseOutOfRange(response);
        s.response = response;
        s.responseHash = responseHash;
        s.tag = tag;
        s.lastUpdate = block.timestamp;
        s.hasResponse = true;
        emit ValidationResponse(s.validatorAddress, s.agentId, requestHash, response, responseURI, responseHash, tag);
    }

    function getValidationStatus(bytes32 requestHash)
        external
        view
        returns (
            address validatorAddress,
            uint256 agentId,
            uint8 response,
            bytes32 responseHash,
            string memory tag,
            uint256 lastUpdate
        )
    {
        ValidationStatus storage s = _validations[requestHash];
        if (s.validatorAddress == address(0)) revert UnknownRequest(requestHash);
        return (s.validatorAddress, s.agentId, s.response, s.responseHash, s.tag, s.lastUpdate);
    }

    /// The count and average of the answered requests of `agentId`, from any of
    /// `validatorAddresses` (all when empty) with `tag` (any when empty).
    function getSummary(uint256 agentId, address[] calldata validatorAddresses, string calldata tag)
        external
        view
        returns (uint64 count, uint8 avgResponse)
    {
        uint256 total;
        bytes32[] storage hashes = _agentValidations[agentId];
        for (uint256 i; i < hashes.length; i++) {
            ValidationStatus storage s = _validations[hashes[i]];
            if (!s.hasResponse) continue;
            if (bytes(tag).length > 0 && keccak256(bytes(s.tag)) != keccak256(bytes(tag))) continue;
            bool named = validatorAddresses.length == 0;
            for (uint256 j; !named && j < validatorAddresses.length; j++) {
                named = s.validatorAddress == validatorAddresses[j];
            }
            if (!named) continue;
            total += s.response;
            count++;
        }
        avgResponse = count == 0 ? 0 : uint8(total / count);
    }

    function getAgentValidations(uint256 agentId) external view returns (bytes32[] memory) {
        return _agentValidations[agentId];
    }

    function getValidatorRequests(address validatorAddress) external view returns (bytes32[] memory) {
        return _validatorRequests[validatorAddress];
    }
}
