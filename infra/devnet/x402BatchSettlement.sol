// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {SignatureChecker} from "@openzeppelin/contracts/utils/cryptography/SignatureChecker.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {Multicall} from "@openzeppelin/contracts/utils/Multicall.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";

/// Moves a payer's tokens into the settlement contract for a deposit; only the
/// settlement contract may call it, and it must receive exactly `amount`.
interface IDepositCollector {
    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external;
}

/// The EIP-3009 entry point deposits use (USDC v2.2's `bytes` signature overload).
interface IERC3009Receive {
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external;
}

/// x402's `batch-settlement` channels (the scheme's EVM binding), written from the
/// scheme's specification and the public interface of its reference contract, for local
/// chains: same ABI, events, errors and EIP-712 types, so the reference clients and
/// facilitator work against it unmodified once it sits at the address they name.
///
/// A payer deposits into a channel (an immutable config whose EIP-712 hash is its id)
/// and pays each request with a cumulative voucher signed off-chain; the receiver claims
/// vouchers in batches (`claimWithSignature`) and sweeps what it claimed (`settle`). The
/// payer's escape hatch is a timed withdrawal; the receiver must claim before it ends.
/// `balance` is what was deposited less withdrawals and refunds (claims do not lower it):
/// what the payer can still take back is `balance - totalClaimed`.
contract x402BatchSettlement is EIP712, Multicall, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;

    struct ChannelConfig {
        address payer;
        address payerAuthorizer;
        address receiver;
        address receiverAuthorizer;
        address token;
        uint40 withdrawDelay;
        bytes32 salt;
    }

    struct ChannelState {
        uint128 balance;
        uint128 totalClaimed;
    }

    struct WithdrawalState {
        uint128 amount;
        uint40 initiatedAt;
    }

    struct ReceiverState {
        uint128 totalClaimed;
        uint128 totalSettled;
    }

    struct Voucher {
        ChannelConfig channel;
        uint128 maxClaimableAmount;
    }

    /// `totalClaimed` is cumulative: what the receiver has claimed of the channel in all.
    struct VoucherClaim {
        Voucher voucher;
        bytes signature;
        uint128 totalClaimed;
    }

    uint40 public constant MIN_WITHDRAW_DELAY = 15 minutes;
    uint40 public constant MAX_WITHDRAW_DELAY = 30 days;

    bytes32 public constant CHANNEL_CONFIG_TYPEHASH = keccak256(
        "ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)"
    );
    bytes32 public constant VOUCHER_TYPEHASH = keccak256("Voucher(bytes32 channelId,uint128 maxClaimableAmount)");
    bytes32 public constant REFUND_TYPEHASH = keccak256("Refund(bytes32 channelId,uint256 nonce,uint128 amount)");
    bytes32 public constant CLAIM_ENTRY_TYPEHASH =
        keccak256("ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)");
    bytes32 public constant CLAIM_BATCH_TYPEHASH = keccak256(
        "ClaimBatch(ClaimEntry[] claims)ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"
    );

    mapping(bytes32 channelId => ChannelState) public channels;
    mapping(bytes32 channelId => uint256) public refundNonce;
    mapping(bytes32 channelId => WithdrawalState) public pendingWithdrawals;
    mapping(address receiver => mapping(address token => ReceiverState)) public receivers;

    event ChannelCreated(bytes32 indexed channelId, ChannelConfig config);
    event ChannelClosed(bytes32 indexed channelId, ChannelConfig config);
    event Deposited(bytes32 indexed channelId, address indexed sender, uint128 amount, uint128 newBalance);
    event Claimed(bytes32 indexed channelId, address indexed sender, uint128 claimAmount, uint128 newTotalClaimed);
    event Settled(address indexed receiver, address indexed token, address indexed sender, uint128 amount);
    event Refunded(bytes32 indexed channelId, address indexed sender, uint128 amount);
    event WithdrawInitiated(bytes32 indexed channelId, uint128 amount, uint40 finalizeAfter);
    event WithdrawFinalized(bytes32 indexed channelId, address indexed sender, uint128 amount);

    error InvalidChannel();
    error ZeroDeposit();
    error DepositOverflow();
    error InvalidSignature();
    error NotReceiverAuthorizer();
    error NotAuthorizedToClaim();
    error NotAuthorizedToRefund();
    error ClaimExceedsCeiling();
    error ClaimExceedsBalance();
    error WithdrawalAlreadyPending();
    error WithdrawalNotPending();
    error NotAuthorizedToFinalizeWithdraw();
    error WithdrawDelayNotElapsed();
    error NothingToWithdraw();
    error WithdrawAmountExceedsAvailable();
    error WithdrawDelayOutOfRange();
    error EmptyBatch();
    error DepositCollectionFailed();
    error InvalidCollector();
    error InvalidRefundNonce();
    error ZeroRefund();

    constructor() EIP712("x402 Batch Settlement", "1") {}

    // ---- deposits ----

    /// Anyone may relay a deposit: the collector pulls the payer's tokens only with the
    /// payer's own authorization, bound to this channel, and the balance must rise by
    /// exactly `amount`.
    function deposit(ChannelConfig calldata config, uint128 amount, address collector, bytes calldata collectorData)
        external
        nonReentrant
    {
        if (
            config.payer == address(0) || config.receiver == address(0) || config.receiverAuthorizer == address(0)
                || config.token == address(0)
        ) revert InvalidChannel();
        if (config.withdrawDelay < MIN_WITHDRAW_DELAY || config.withdrawDelay > MAX_WITHDRAW_DELAY) {
            revert WithdrawDelayOutOfRange();
        }
        if (amount == 0) revert ZeroDeposit();
        if (collector == address(0)) revert InvalidCollector();
        bytes32 channelId = getChannelId(config);
        ChannelState storage ch = channels[channelId];
        if (amount > type(uint128).max - ch.balance) revert DepositOverflow();
        ch.balance += amount;
        uint256 before = IERC20(config.token).balanceOf(address(this));
        IDepositCollector(collector).collect(config.payer, config.token, amount, channelId, collectorData);
        if (IERC20(config.token).balanceOf(address(this)) != before + amount) revert DepositCollectionFailed();
        if (ch.balance == amount && ch.totalClaimed == 0) emit ChannelCreated(channelId, config);
        emit Deposited(channelId, msg.sender, amount, ch.balance);
    }

    // ---- claims and settlement ----

    function claim(VoucherClaim[] calldata voucherClaims) external nonReentrant {
        if (voucherClaims.length == 0) revert EmptyBatch();
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            ChannelConfig calldata c = voucherClaims[i].voucher.channel;
            if (msg.sender != c.receiverAuthorizer && msg.sender != c.receiver) revert NotAuthorizedToClaim();
            _processVoucherClaim(voucherClaims[i]);
        }
    }

    /// Anyone may submit a batch the receiver authorizer signed; every row must name
    /// that same authorizer.
    function claimWithSignature(VoucherClaim[] calldata voucherClaims, bytes calldata authorizerSignature)
        external
        nonReentrant
    {
        if (voucherClaims.length == 0) revert EmptyBatch();
        address authorizer = voucherClaims[0].voucher.channel.receiverAuthorizer;
        bytes32 digest = getClaimBatchDigest(voucherClaims);
        if (!SignatureChecker.isValidSignatureNow(authorizer, digest, authorizerSignature)) revert InvalidSignature();
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            if (voucherClaims[i].voucher.channel.receiverAuthorizer != authorizer) revert NotReceiverAuthorizer();
            _processVoucherClaim(voucherClaims[i]);
        }
    }

    /// A row claiming no more than is claimed already is a no-op (a replayed batch, or
    /// the refund path's claim row): nothing checked, nothing emitted.
    function _processVoucherClaim(VoucherClaim calldata vc) internal {
        ChannelConfig calldata config = vc.voucher.channel;
        bytes32 channelId = getChannelId(config);
        ChannelState storage ch = channels[channelId];
        if (vc.totalClaimed <= ch.totalClaimed) return;
        if (vc.totalClaimed > vc.voucher.maxClaimableAmount) revert ClaimExceedsCeiling();
        if (vc.totalClaimed > ch.balance) revert ClaimExceedsBalance();
        bytes32 digest = getVoucherDigest(channelId, vc.voucher.maxClaimableAmount);
        if (config.payerAuthorizer != address(0)) {
            if (ECDSA.recoverCalldata(digest, vc.signature) != config.payerAuthorizer) revert InvalidSignature();
        } else if (!SignatureChecker.isValidSignatureNow(config.payer, digest, vc.signature)) {
            revert InvalidSignature();
        }
        uint128 delta = vc.totalClaimed - ch.totalClaimed;
        ch.totalClaimed = vc.totalClaimed;
        receivers[config.receiver][config.token].totalClaimed += delta;
        emit Claimed(channelId, msg.sender, delta, vc.totalClaimed);
    }

    /// Permissionless: sends the receiver everything claimed for it and not yet sent.
    function settle(address receiver, address token) external nonReentrant {
        ReceiverState storage rs = receivers[receiver][token];
        uint128 amount = rs.totalClaimed - rs.totalSettled;
        if (amount == 0) return;
        rs.totalSettled = rs.totalClaimed;
        IERC20(token).safeTransfer(receiver, amount);
        emit Settled(receiver, token, msg.sender, amount);
    }

    // ---- the payer's timed withdrawal ----

    function initiateWithdraw(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        if (msg.sender != config.payer && msg.sender != config.payerAuthorizer) revert InvalidChannel();
        if (amount == 0) revert NothingToWithdraw();
        bytes32 channelId = getChannelId(config);
        WithdrawalState storage ws = pendingWithdrawals[channelId];
        if (ws.initiatedAt != 0) revert WithdrawalAlreadyPending();
        ChannelState storage ch = channels[channelId];
        if (amount > ch.balance - ch.totalClaimed) revert WithdrawAmountExceedsAvailable();
        ws.amount = amount;
        ws.initiatedAt = uint40(block.timestamp);
        emit WithdrawInitiated(channelId, amount, uint40(block.timestamp) + config.withdrawDelay);
    }

    /// Pays out what is still unclaimed of the request: claims made during the delay
    /// come first.
    function finalizeWithdraw(ChannelConfig calldata config) external nonReentrant {
        if (msg.sender != config.payer && msg.sender != config.payerAuthorizer) {
            revert NotAuthorizedToFinalizeWithdraw();
        }
        bytes32 channelId = getChannelId(config);
        WithdrawalState storage ws = pendingWithdrawals[channelId];
        if (ws.initiatedAt == 0) revert WithdrawalNotPending();
        if (block.timestamp < uint256(ws.initiatedAt) + config.withdrawDelay) revert WithdrawDelayNotElapsed();
        ChannelState storage ch = channels[channelId];
        uint128 available = ch.balance - ch.totalClaimed;
        uint128 amount = ws.amount < available ? ws.amount : available;
        delete pendingWithdrawals[channelId];
        ch.balance -= amount;
        emit WithdrawFinalized(channelId, msg.sender, amount);
        if (ch.balance == 0 && ch.totalClaimed == 0) emit ChannelClosed(channelId, config);
        if (amount > 0) IERC20(config.token).safeTransfer(config.payer, amount);
    }

    // ---- cooperative refunds ----

    function refund(ChannelConfig calldata config, uint128 amount) external nonReentrant {
        if (msg.sender != config.receiverAuthorizer && msg.sender != config.receiver) revert NotAuthorizedToRefund();
        _executeRefund(config, amount);
    }

    function refundWithSignature(
        ChannelConfig calldata config,
        uint128 amount,
        uint256 nonce,
        bytes calldata receiverAuthorizerSignature
    ) external nonReentrant {
        bytes32 channelId = getChannelId(config);
        if (nonce != refundNonce[channelId]) revert InvalidRefundNonce();
        bytes32 digest = getRefundDigest(channelId, nonce, amount);
        if (!SignatureChecker.isValidSignatureNow(config.receiverAuthorizer, digest, receiverAuthorizerSignature)) {
            revert InvalidSignature();
        }
        _executeRefund(config, amount);
    }

    /// The nonce advances before the amount is capped: a refund that moves nothing still
    /// uses up its signature.
    function _executeRefund(ChannelConfig calldata config, uint128 amount) internal {
        if (amount == 0) revert ZeroRefund();
        bytes32 channelId = getChannelId(config);
        unchecked {
            refundNonce[channelId]++;
        }
        ChannelState storage ch = channels[channelId];
        uint128 available = ch.balance - ch.totalClaimed;
        uint128 refunded = amount < available ? amount : available;
        if (refunded == 0) return;
        ch.balance -= refunded;
        WithdrawalState storage pws = pendingWithdrawals[channelId];
        if (pws.initiatedAt != 0) {
            if (refunded >= pws.amount) {
                delete pendingWithdrawals[channelId];
            } else {
                pws.amount -= refunded;
            }
        }
        emit Refunded(channelId, msg.sender, refunded);
        if (ch.balance == 0 && ch.totalClaimed == 0) emit ChannelClosed(channelId, config);
        IERC20(config.token).safeTransfer(config.payer, refunded);
    }

    // ---- digests ----

    function getChannelId(ChannelConfig calldata config) public view returns (bytes32) {
        return _hashTypedDataV4(keccak256(abi.encode(CHANNEL_CONFIG_TYPEHASH, config)));
    }

    function getVoucherDigest(bytes32 channelId, uint128 maxClaimableAmount) public view returns (bytes32) {
        return _hashTypedDataV4(keccak256(abi.encode(VOUCHER_TYPEHASH, channelId, maxClaimableAmount)));
    }

    function getRefundDigest(bytes32 channelId, uint256 nonce, uint128 amount) public view returns (bytes32) {
        return _hashTypedDataV4(keccak256(abi.encode(REFUND_TYPEHASH, channelId, nonce, amount)));
    }

    function getClaimBatchDigest(VoucherClaim[] calldata voucherClaims) public view returns (bytes32) {
        bytes32[] memory entries = new bytes32[](voucherClaims.length);
        for (uint256 i = 0; i < voucherClaims.length; i++) {
            entries[i] = keccak256(
                abi.encode(
                    CLAIM_ENTRY_TYPEHASH,
                    getChannelId(voucherClaims[i].voucher.channel),
                    voucherClaims[i].voucher.maxClaimableAmount,
                    voucherClaims[i].totalClaimed
                )
            );
        }
        return _hashTypedDataV4(keccak256(abi.encode(CLAIM_BATCH_TYPEHASH, keccak256(abi.encodePacked(entries)))));
    }
}

/// Deposits by EIP-3009 `receiveWithAuthorization`: the payer signs a transfer to this
/// collector whose nonce binds the channel (`keccak256(abi.encode(channelId, salt))`),
/// so an authorization cannot be spent for another channel; the tokens go on to the
/// settlement contract, the only caller.
contract ERC3009DepositCollector is IDepositCollector {
    using SafeERC20 for IERC20;

    address public immutable x402BatchSettlement;

    error OnlyX402BatchSettlement();
    error InvalidX402BatchSettlementAddress();

    constructor(address _x402BatchSettlement) {
        if (_x402BatchSettlement == address(0)) revert InvalidX402BatchSettlementAddress();
        x402BatchSettlement = _x402BatchSettlement;
    }

    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external
        override
    {
        if (msg.sender != x402BatchSettlement) revert OnlyX402BatchSettlement();
        (uint256 validAfter, uint256 validBefore, uint256 salt, bytes memory signature) =
            abi.decode(collectorData, (uint256, uint256, uint256, bytes));
        bytes32 nonce = keccak256(abi.encode(channelId, salt));
        IERC3009Receive(token).receiveWithAuthorization(
            payer, address(this), amount, validAfter, validBefore, nonce, signature
        );
        IERC20(token).safeTransfer(x402BatchSettlement, amount);
    }
}
