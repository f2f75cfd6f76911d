// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

/// A hostile contract wallet for tests of what a smart-wallet payment may cost its
/// settler: its ERC-1271 check accepts its owner's signature (65 bytes, and a trailing
/// byte so x402 reads it as a contract wallet's), burns `burn` rounds of hashing on
/// the settler's gas, and stops accepting once its owner `arm`s it (as a payer would
/// between our verification and our transaction's block). Test chains only.
contract CostlyWallet {
    bytes4 private constant MAGIC = 0x1626ba7e;
    address public immutable owner;
    uint256 public burn;
    bool public armed;

    constructor(address owner_, uint256 burn_) {
        owner = owner_;
        burn = burn_;
    }

    function arm() external {
        require(msg.sender == owner, "CostlyWallet: only the owner");
        armed = true;
    }

    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        bytes32 h = hash;
        for (uint256 i = 0; i < burn; i++) {
            h = keccak256(abi.encodePacked(h, i));
        }
        if (armed || signature.length != 66 || h == bytes32(0)) {
            return bytes4(0xffffffff);
        }
        (address signer, ECDSA.RecoverError err,) = ECDSA.tryRecover(hash, signature[:65]);
        return err == ECDSA.RecoverError.NoError && signer == owner ? MAGIC : bytes4(0xffffffff);
    }
}
