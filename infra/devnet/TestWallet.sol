// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

/// A minimal contract wallet for tests: its owner moves funds through `execute`, and it
/// answers ERC-1271 `isValidSignature` for hashes its owner signed (as Coinbase Smart
/// Wallet and Safe answer for their owners). Test chains only.
contract TestWallet {
    bytes4 private constant MAGIC = 0x1626ba7e;
    address public immutable owner;

    constructor(address owner_) {
        owner = owner_;
    }

    function execute(address to, bytes calldata data) external returns (bytes memory) {
        require(msg.sender == owner, "TestWallet: only the owner");
        (bool ok, bytes memory out) = to.call(data);
        require(ok, "TestWallet: call failed");
        return out;
    }

    /// Several calls in one transaction (as smart wallets batch), all or nothing.
    function executeBatch(address[] calldata to, bytes[] calldata data) external {
        require(msg.sender == owner, "TestWallet: only the owner");
        require(to.length == data.length, "TestWallet: lengths differ");
        for (uint256 i = 0; i < to.length; i++) {
            (bool ok,) = to[i].call(data[i]);
            require(ok, "TestWallet: call failed");
        }
    }

    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        (address signer, ECDSA.RecoverError err,) = ECDSA.tryRecover(hash, signature);
        return err == ECDSA.RecoverError.NoError && signer == owner ? MAGIC : bytes4(0xffffffff);
    }
}
