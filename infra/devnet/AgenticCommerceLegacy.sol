// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";

/// ERC-8183 (Agentic Commerce) as its text stood when Umpire's evaluator was first
/// written: kept on the devnet because escrows of this shape are deployed, and the
/// evaluator reads both (docs/erc8183.md). The current shape is AgenticCommerce.sol.
///
/// - Six states: Open -> Funded -> Submitted -> Completed | Rejected | Expired.
/// - One ERC-20 payment token per contract, set at deployment. No fees, no grace period.
/// - `getJob` answers eight fields: client, provider, evaluator, description, budget,
///   expiredAt, status, hook.
/// - The non-hooked kernel: `createJob` refuses any hook but address(0); `optParams`
///   are accepted and ignored.
/// - Only the evaluator completes a submitted job, or rejects a funded or submitted
///   one; the client rejects only while Open; anyone may claim the refund of an
///   expired job.
contract AgenticCommerceLegacy is ReentrancyGuard {
    using SafeERC20 for IERC20;

    enum JobStatus {
        Open,
        Funded,
        Submitted,
        Completed,
        Rejected,
        Expired
    }

    struct Job {
        address client;
        address provider;
        address evaluator;
        string description;
        uint256 budget;
        uint256 expiredAt;
        JobStatus status;
        address hook;
    }

    IERC20 public immutable paymentToken;
    /// The last job id handed out; ids start at 1, so 0 is never a job.
    uint256 public jobCounter;
    mapping(uint256 => Job) private _jobs;

    event JobCreated(
        uint256 indexed jobId, address indexed client, address indexed provider, address evaluator, uint256 expiredAt
    );
    event ProviderSet(uint256 indexed jobId, address indexed provider);
    event BudgetSet(uint256 indexed jobId, uint256 amount);
    event JobFunded(uint256 indexed jobId, address indexed client, uint256 amount);
    event JobSubmitted(uint256 indexed jobId, address indexed provider, bytes32 deliverable);
    event JobCompleted(uint256 indexed jobId, address indexed evaluator, bytes32 reason);
    event JobRejected(uint256 indexed jobId, address indexed rejector, bytes32 reason);
    event JobExpired(uint256 indexed jobId);
    event PaymentReleased(uint256 indexed jobId, address indexed provider, uint256 amount);
    event Refunded(uint256 indexed jobId, address indexed client, uint256 amount);

    error UnknownJob(uint256 jobId);
    error WrongStatus(JobStatus status);
    error Unauthorized(address caller);
    error ZeroAddress();
    error ExpiryNotInFuture();
    error HooksUnsupported();
    error ProviderNotSet();
    error ProviderAlreadySet();
    error ZeroBudget();
    error BudgetMismatch(uint256 budget, uint256 expected);
    error JobHasExpired(uint256 expiredAt);
    error NotExpired(uint256 expiredAt);

    constructor(IERC20 token) {
        if (address(token) == address(0)) revert ZeroAddress();
        paymentToken = token;
    }

    function _job(uint256 jobId) private view returns (Job storage job) {
        if (jobId == 0 || jobId > jobCounter) revert UnknownJob(jobId);
        job = _jobs[jobId];
    }

    function getJob(uint256 jobId) external view returns (Job memory) {
        return _job(jobId);
    }

    function createJob(
        address provider,
        address evaluator,
        uint256 expiredAt,
        string calldata description,
        address hook
    ) external returns (uint256 jobId) {
        if (evaluator == address(0)) revert ZeroAddress();
        if (expiredAt <= block.timestamp) revert ExpiryNotInFuture();
        if (hook != address(0)) revert HooksUnsupported();
        jobId = ++jobCounter;
        _jobs[jobId] = Job({
            client: msg.sender,
            provider: provider,
            evaluator: evaluator,
            description: description,
            budget: 0,
            expiredAt: expiredAt,
            status: JobStatus.Open,
            hook: address(0)
        });
        emit JobCreated(jobId, msg.sender, provider, evaluator, expiredAt);
    }

    function setProvider(uint256 jobId, address provider, bytes calldata) external {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Open) revert WrongStatus(job.status);
        if (msg.sender != job.client) revert Unauthorized(msg.sender);
        if (job.provider != address(0)) revert ProviderAlreadySet();
        if (provider == address(0)) revert ZeroAddress();
        job.provider = provider;
        emit ProviderSet(jobId, provider);
    }

    function setBudget(uint256 jobId, uint256 amount, bytes calldata) external {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Open) revert WrongStatus(job.status);
        if (msg.sender != job.client && msg.sender != job.provider) revert Unauthorized(msg.sender);
        job.budget = amount;
        emit BudgetSet(jobId, amount);
    }

    /// `expectedBudget` guards the client against a budget changed under it (front-running).
    function fund(uint256 jobId, uint256 expectedBudget, bytes calldata) external nonReentrant {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Open) revert WrongStatus(job.status);
        if (msg.sender != job.client) revert Unauthorized(msg.sender);
        if (job.budget == 0) revert ZeroBudget();
        if (job.provider == address(0)) revert ProviderNotSet();
        if (job.budget != expectedBudget) revert BudgetMismatch(job.budget, expectedBudget);
        // A job funded after its expiry could only be refunded: refuse it instead.
        if (block.timestamp >= job.expiredAt) revert JobHasExpired(job.expiredAt);
        job.status = JobStatus.Funded;
        paymentToken.safeTransferFrom(job.client, address(this), job.budget);
        emit JobFunded(jobId, job.client, job.budget);
    }

    /// `deliverable` is the provider's commitment to its work (for an Umpire evaluation,
    /// the verdict's deliverable_hash).
    function submit(uint256 jobId, bytes32 deliverable, bytes calldata) external {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Funded) revert WrongStatus(job.status);
        if (msg.sender != job.provider) revert Unauthorized(msg.sender);
        job.status = JobStatus.Submitted;
        emit JobSubmitted(jobId, job.provider, deliverable);
    }

    function complete(uint256 jobId, bytes32 reason, bytes calldata) external nonReentrant {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Submitted) revert WrongStatus(job.status);
        if (msg.sender != job.evaluator) revert Unauthorized(msg.sender);
        job.status = JobStatus.Completed;
        paymentToken.safeTransfer(job.provider, job.budget);
        emit JobCompleted(jobId, msg.sender, reason);
        emit PaymentReleased(jobId, job.provider, job.budget);
    }

    function reject(uint256 jobId, bytes32 reason, bytes calldata) external nonReentrant {
        Job storage job = _job(jobId);
        JobStatus was = job.status;
        if (was == JobStatus.Open) {
            if (msg.sender != job.client) revert Unauthorized(msg.sender);
        } else if (was == JobStatus.Funded || was == JobStatus.Submitted) {
            if (msg.sender != job.evaluator) revert Unauthorized(msg.sender);
        } else {
            revert WrongStatus(was);
        }
        job.status = JobStatus.Rejected;
        if (was != JobStatus.Open) {
            paymentToken.safeTransfer(job.client, job.budget);
            emit Refunded(jobId, job.client, job.budget);
        }
        emit JobRejected(jobId, msg.sender, reason);
    }

    function claimRefund(uint256 jobId) external nonReentrant {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Funded && job.status != JobStatus.Submitted) revert WrongStatus(job.status);
        if (block.timestamp < job.expiredAt) revert NotExpired(job.expiredAt);
        job.status = JobStatus.Expired;
        paymentToken.safeTransfer(job.client, job.budget);
        emit Refunded(jobId, job.client, job.budget);
        emit JobExpired(jobId);
    }
}
