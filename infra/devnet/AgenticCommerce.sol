// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuard} from "@openzeppelin/contracts/utils/ReentrancyGuard.sol";

/// ERC-8183 (Agentic Commerce) as its text now stands: job escrow with evaluator
/// attestation, written from the ERC's text for local chains, with `getJob` answering
/// the layout the ERC's reference implementation returns (and its published testnet
/// deployments), so `umpire evaluate` meets on the devnet what it meets in the field.
///
/// - Six states: Open -> Funded -> Submitted -> Completed | Rejected | Expired.
/// - A payment token per job, agreed with the amount (`setBudget(jobId, token, amount,
///   optParams)`); an optional ERC-8004 agent id for the provider.
/// - Optional fees, in basis points, taken only on completion: a platform fee to a
///   treasury and an evaluator fee to the job's evaluator (set by the admin).
/// - The reference implementation's evaluation grace period (not in the ERC's text,
///   which lets the refund be claimed from `expiredAt`): once the provider has
///   submitted, the refund cannot be claimed until `submittedAt +
///   EVALUATION_GRACE_PERIOD`, even past `expiredAt`, so a late submission still gets
///   its evaluation.
/// - The non-hooked kernel the ERC calls fully compliant: `createJob` refuses any hook
///   but address(0); `optParams` are accepted and, with no hook, ignored.
contract AgenticCommerce is ReentrancyGuard {
    using SafeERC20 for IERC20;

    enum JobStatus {
        Open,
        Funded,
        Submitted,
        Completed,
        Rejected,
        Expired
    }

    /// Field for field, and in this order, what the reference implementation's getJob
    /// returns.
    struct Job {
        uint256 id;
        address client;
        address provider;
        address evaluator;
        string description;
        uint256 budget;
        uint256 expiredAt;
        JobStatus status;
        address hook;
        address paymentToken;
        uint256 providerAgentId;
        uint256 submittedAt;
    }

    uint256 public constant EVALUATION_GRACE_PERIOD = 1 hours;
    /// The ERC's floor on a new job's life.
    uint256 public constant MIN_LIFETIME = 5 minutes;
    uint256 private constant BP = 10_000;

    address public immutable admin;
    address public platformTreasury;
    uint256 public platformFeeBP;
    uint256 public evaluatorFeeBP;
    /// The last job id handed out; ids start at 1, so 0 is never a job.
    uint256 public jobCounter;
    mapping(uint256 => Job) private _jobs;

    event JobCreated(
        uint256 indexed jobId,
        address indexed client,
        address indexed provider,
        address evaluator,
        uint256 expiredAt,
        address hook
    );
    event ProviderSet(uint256 indexed jobId, address indexed provider, uint256 agentId);
    event BudgetSet(uint256 indexed jobId, address indexed token, uint256 amount);
    event JobFunded(uint256 indexed jobId, address indexed client, uint256 amount);
    event JobSubmitted(uint256 indexed jobId, address indexed provider, bytes32 deliverable);
    event JobCompleted(uint256 indexed jobId, address indexed evaluator, bytes32 reason);
    event JobRejected(uint256 indexed jobId, address indexed rejector, bytes32 reason);
    event JobExpired(uint256 indexed jobId);
    event PaymentReleased(uint256 indexed jobId, address indexed provider, uint256 amount);
    event PlatformFeePaid(uint256 indexed jobId, address indexed platformTreasury, uint256 amount);
    event EvaluatorFeePaid(uint256 indexed jobId, address indexed evaluator, uint256 amount);
    event Refunded(uint256 indexed jobId, address indexed client, uint256 amount);
    event PlatformFeeSet(uint256 feeBP, address indexed treasury);
    event EvaluatorFeeSet(uint256 feeBP);

    error UnknownJob(uint256 jobId);
    error WrongStatus(JobStatus status);
    error Unauthorized(address caller);
    error ZeroAddress();
    error ExpiryTooSoon(uint256 expiredAt, uint256 earliest);
    error HooksUnsupported();
    error ProviderIsEvaluator();
    error ProviderNotSet();
    error ProviderAlreadySet();
    error BudgetMismatch(uint256 budget, uint256 expected);
    error JobHasExpired(uint256 expiredAt);
    error NotExpired(uint256 refundableAt);
    error FeesTooHigh(uint256 totalBP);

    constructor(address treasury) {
        if (treasury == address(0)) revert ZeroAddress();
        admin = msg.sender;
        platformTreasury = treasury;
    }

    function _job(uint256 jobId) private view returns (Job storage job) {
        if (jobId == 0 || jobId > jobCounter) revert UnknownJob(jobId);
        job = _jobs[jobId];
    }

    /// A job that does not exist answers zeroed (as the reference does), not a revert.
    function getJob(uint256 jobId) external view returns (Job memory) {
        return _jobs[jobId];
    }

    // Admin: the fees, together never all of a budget.

    function setPlatformFee(uint256 feeBP, address treasury) external {
        if (msg.sender != admin) revert Unauthorized(msg.sender);
        if (treasury == address(0)) revert ZeroAddress();
        if (feeBP + evaluatorFeeBP >= BP) revert FeesTooHigh(feeBP + evaluatorFeeBP);
        platformFeeBP = feeBP;
        platformTreasury = treasury;
        emit PlatformFeeSet(feeBP, treasury);
    }

    function setEvaluatorFee(uint256 feeBP) external {
        if (msg.sender != admin) revert Unauthorized(msg.sender);
        if (feeBP + platformFeeBP >= BP) revert FeesTooHigh(feeBP + platformFeeBP);
        evaluatorFeeBP = feeBP;
        emit EvaluatorFeeSet(feeBP);
    }

    // The job's life.

    function createJob(
        address provider,
        address evaluator,
        uint256 expiredAt,
        string calldata description,
        address hook,
        uint256 providerAgentId
    ) external returns (uint256 jobId) {
        if (evaluator == address(0)) revert ZeroAddress();
        if (provider == evaluator) revert ProviderIsEvaluator();
        if (expiredAt < block.timestamp + MIN_LIFETIME) {
            revert ExpiryTooSoon(expiredAt, block.timestamp + MIN_LIFETIME);
        }
        if (hook != address(0)) revert HooksUnsupported();
        jobId = ++jobCounter;
        Job storage job = _jobs[jobId];
        job.id = jobId;
        job.client = msg.sender;
        job.provider = provider;
        job.evaluator = evaluator;
        job.description = description;
        job.expiredAt = expiredAt;
        // An agent id means nothing without the provider it names.
        job.providerAgentId = provider == address(0) ? 0 : providerAgentId;
        emit JobCreated(jobId, msg.sender, provider, evaluator, expiredAt, address(0));
    }

    function setProvider(uint256 jobId, address provider, uint256 agentId) external {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Open) revert WrongStatus(job.status);
        if (msg.sender != job.client) revert Unauthorized(msg.sender);
        if (job.provider != address(0)) revert ProviderAlreadySet();
        if (provider == address(0)) revert ZeroAddress();
        if (provider == job.evaluator) revert ProviderIsEvaluator();
        job.provider = provider;
        job.providerAgentId = agentId;
        emit ProviderSet(jobId, provider, agentId);
    }

    function setBudget(uint256 jobId, address token, uint256 amount, bytes calldata) external {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Open) revert WrongStatus(job.status);
        if (msg.sender != job.client && msg.sender != job.provider) revert Unauthorized(msg.sender);
        if (token == address(0)) revert ZeroAddress();
        job.paymentToken = token;
        job.budget = amount;
        emit BudgetSet(jobId, token, amount);
    }

    /// `expectedBudget` guards the client against a budget changed under it (front-running).
    function fund(uint256 jobId, uint256 expectedBudget, bytes calldata) external nonReentrant {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Open) revert WrongStatus(job.status);
        if (msg.sender != job.client) revert Unauthorized(msg.sender);
        if (job.provider == address(0)) revert ProviderNotSet();
        if (job.budget != expectedBudget) revert BudgetMismatch(job.budget, expectedBudget);
        // A job funded after its expiry could only be refunded: refuse it instead.
        if (block.timestamp >= job.expiredAt) revert JobHasExpired(job.expiredAt);
        job.status = JobStatus.Funded;
        if (job.budget > 0) {
            IERC20(job.paymentToken).safeTransferFrom(job.client, address(this), job.budget);
        }
        emit JobFunded(jobId, job.client, job.budget);
    }

    /// `deliverable` is the provider's commitment to its work (for an Umpire evaluation,
    /// the verdict's deliverable_hash). A job with no budget needs no funding.
    function submit(uint256 jobId, bytes32 deliverable, bytes calldata) external {
        Job storage job = _job(jobId);
        bool unfundedFree = job.status == JobStatus.Open && job.budget == 0;
        if (job.status != JobStatus.Funded && !unfundedFree) revert WrongStatus(job.status);
        if (msg.sender != job.provider) revert Unauthorized(msg.sender);
        job.status = JobStatus.Submitted;
        job.submittedAt = block.timestamp;
        emit JobSubmitted(jobId, job.provider, deliverable);
    }

    /// Pays the provider the budget less the fees; the fees go to the treasury and the
    /// evaluator.
    function complete(uint256 jobId, bytes32 reason, bytes calldata) external nonReentrant {
        Job storage job = _job(jobId);
        if (job.status != JobStatus.Submitted) revert WrongStatus(job.status);
        if (msg.sender != job.evaluator) revert Unauthorized(msg.sender);
        job.status = JobStatus.Completed;
        uint256 platformFee = (job.budget * platformFeeBP) / BP;
        uint256 evaluatorFee = (job.budget * evaluatorFeeBP) / BP;
        uint256 net = job.budget - platformFee - evaluatorFee;
        IERC20 token = IERC20(job.paymentToken);
        if (platformFee > 0) {
            token.safeTransfer(platformTreasury, platformFee);
            emit PlatformFeePaid(jobId, platformTreasury, platformFee);
        }
        if (evaluatorFee > 0) {
            token.safeTransfer(job.evaluator, evaluatorFee);
            emit EvaluatorFeePaid(jobId, job.evaluator, evaluatorFee);
        }
        if (net > 0) token.safeTransfer(job.provider, net);
        emit JobCompleted(jobId, msg.sender, reason);
        emit PaymentReleased(jobId, job.provider, net);
    }

    /// Refunds the whole budget (no fee on a refund).
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
        if (was != JobStatus.Open && job.budget > 0) {
            IERC20(job.paymentToken).safeTransfer(job.client, job.budget);
            emit Refunded(jobId, job.client, job.budget);
        }
        emit JobRejected(jobId, msg.sender, reason);
    }

    /// Anyone, once the job expired (and, if submitted, its grace period is over).
    function claimRefund(uint256 jobId) external nonReentrant {
        Job storage job = _job(jobId);
        JobStatus was = job.status;
        if (was != JobStatus.Open && was != JobStatus.Funded && was != JobStatus.Submitted) {
            revert WrongStatus(was);
        }
        uint256 refundableAt = job.expiredAt;
        if (was == JobStatus.Submitted && job.submittedAt + EVALUATION_GRACE_PERIOD > refundableAt) {
            refundableAt = job.submittedAt + EVALUATION_GRACE_PERIOD;
        }
        if (block.timestamp < refundableAt) revert NotExpired(refundableAt);
        job.status = JobStatus.Expired;
        if (was != JobStatus.Open && job.budget > 0) {
            IERC20(job.paymentToken).safeTransfer(job.client, job.budget);
            emit Refunded(jobId, job.client, job.budget);
        }
        emit JobExpired(jobId);
    }
}
