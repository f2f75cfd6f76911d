//! Reading the payment out of a transaction as the exact scheme allows it, with the reasons
//! a payload is refused.

use crate::reason::FailureReason;
use crate::svm::{
    COMPUTE_BUDGET_PROGRAM, Instruction, MAX_COMPUTE_UNIT_LIMIT, MAX_MEMO_BYTES, MEMO_PROGRAM,
    Message, Pubkey, SYSTEM_PROGRAM, TOKEN_2022_PROGRAM, TOKEN_PROGRAM, Transaction,
};

/// Why a transaction is not the payment it must be: an x402 reason code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: FailureReason,
    pub message: String,
}

pub(super) fn refuse(reason: FailureReason, message: impl Into<String>) -> Refusal {
    Refusal {
        reason,
        message: message.into(),
    }
}

/// A native SOL payment: one system transfer, signed by the payer, who also pays the fee.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeTransfer {
    pub payer: Pubkey,
    pub to: Pubkey,
    pub lamports: u64,
}

/// Reads a native SOL payment and checks it offline: its only signer is the payer,
/// whose signature verifies; it moves exactly one system transfer from the payer;
/// nothing else runs but compute-budget settings and a memo. The amount and recipient
/// are compared by the caller against the requirements.
pub fn native_transfer(tx: &Transaction) -> Result<NativeTransfer, Refusal> {
    check_native_envelope(tx)?;
    let m = &tx.message;
    let payer = m.fee_payer();
    let (system, budget, memo_program) = (
        Pubkey::known(SYSTEM_PROGRAM),
        Pubkey::known(COMPUTE_BUDGET_PROGRAM),
        Pubkey::known(MEMO_PROGRAM),
    );
    let mut transfer = None;
    let mut extras = Accompaniments::default();
    for ix in &m.instructions {
        let program = m.program_of(ix);
        if program == budget {
            extras.compute_budget(ix)?;
        } else if program == memo_program {
            extras.memo(ix)?;
        } else if program == system {
            if transfer.is_some() {
                return Err(refuse(
                    FailureReason::SvmInstructions,
                    "more than one system transfer",
                ));
            }
            transfer = Some(read_system_transfer(m, ix, payer)?);
        } else {
            return Err(refuse(
                FailureReason::SvmInstructions,
                format!("program {program} has no place in a native SOL payment"),
            ));
        }
    }
    let t = transfer.ok_or_else(|| {
        refuse(
            FailureReason::SvmNoTransfer,
            "the transaction transfers no SOL",
        )
    })?;
    if t.to == t.payer {
        return Err(refuse(FailureReason::SvmRecipient, "the payer pays itself"));
    }
    Ok(t)
}

/// What a native SOL payment's envelope must be before its instructions are read: no
/// address lookup tables, exactly one required signer (the fee payer), and that
/// signer's signature verifying over the message. Checked in that order.
fn check_native_envelope(tx: &Transaction) -> Result<(), Refusal> {
    let m = &tx.message;
    if !m.lookups.is_empty() {
        return Err(refuse(
            FailureReason::SvmTransaction,
            "a native SOL payment may not use address lookup tables",
        ));
    }
    if m.num_required_signatures != 1 {
        return Err(refuse(
            FailureReason::SvmTransaction,
            format!(
                "a native SOL payment has one signer, the payer (who pays its fee); this one has {}",
                m.num_required_signatures
            ),
        ));
    }
    if !tx.signed_by(0) {
        return Err(refuse(
            FailureReason::SvmSignature,
            "the payer's signature does not verify over the transaction",
        ));
    }
    Ok(())
}

/// The instructions allowed beside a native transfer, counted as they are met: at most
/// one SetComputeUnitLimit, one SetComputeUnitPrice and one memo.
#[derive(Default)]
struct Accompaniments {
    limit: bool,
    price: bool,
    memos: u32,
}

impl Accompaniments {
    /// A compute-budget instruction may only be the first SetComputeUnitLimit (5 bytes,
    /// at most [`MAX_COMPUTE_UNIT_LIMIT`] units) or the first SetComputeUnitPrice (9
    /// bytes); anything else, or a repeat, is refused.
    fn compute_budget(&mut self, ix: &Instruction) -> Result<(), Refusal> {
        match ix.data.first() {
            Some(2) if !self.limit && ix.data.len() == 5 => {
                self.limit = true;
                let units = u32::from_le_bytes([ix.data[1], ix.data[2], ix.data[3], ix.data[4]]);
                if units > MAX_COMPUTE_UNIT_LIMIT {
                    return Err(refuse(
                        FailureReason::SvmInstructions,
                        format!(
                            "a compute unit limit of {units} (at most {MAX_COMPUTE_UNIT_LIMIT})"
                        ),
                    ));
                }
            }
            Some(3) if !self.price && ix.data.len() == 9 => self.price = true,
            _ => {
                return Err(refuse(
                    FailureReason::SvmInstructions,
                    "only one SetComputeUnitLimit and one SetComputeUnitPrice may accompany the transfer",
                ));
            }
        }
        Ok(())
    }

    /// A memo is allowed once, of at most [`MAX_MEMO_BYTES`] bytes.
    fn memo(&mut self, ix: &Instruction) -> Result<(), Refusal> {
        self.memos += 1;
        if self.memos > 1 || ix.data.len() > MAX_MEMO_BYTES {
            return Err(refuse(
                FailureReason::SvmInstructions,
                format!("at most one memo of at most {MAX_MEMO_BYTES} bytes"),
            ));
        }
        Ok(())
    }
}

/// Reads a system-program instruction as the payment's transfer. Decides, in order:
/// that it names a from and a to account; that it is a Transfer (12 bytes, tag 2) with
/// exactly those two accounts; that it moves the fee payer's own lamports (account 0)
/// to a writable account.
fn read_system_transfer(
    m: &Message,
    ix: &Instruction,
    payer: Pubkey,
) -> Result<NativeTransfer, Refusal> {
    let is_transfer = ix.data.len() == 12 && ix.data[..4] == 2u32.to_le_bytes();
    let (Some((from_i, from)), Some((to_i, to))) = (m.account_of(ix, 0), m.account_of(ix, 1))
    else {
        return Err(refuse(
            FailureReason::SvmInstructions,
            "a system instruction without its accounts",
        ));
    };
    if !is_transfer || ix.accounts.len() != 2 {
        return Err(refuse(
            FailureReason::SvmInstructions,
            "the only system instruction allowed is Transfer",
        ));
    }
    if from_i != 0 || from != payer || !m.is_writable(to_i) {
        return Err(refuse(
            FailureReason::SvmInstructions,
            "the transfer must move the payer's (the fee payer's) own lamports",
        ));
    }
    let mut amount = [0u8; 8];
    amount.copy_from_slice(&ix.data[4..12]);
    Ok(NativeTransfer {
        payer,
        to,
        lamports: u64::from_le_bytes(amount),
    })
}

/// What an SPL `exact` payment says before the facilitator checks it: who authorizes
/// the transfer (the payer) and whether they signed this message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplTransfer {
    pub authority: Pubkey,
    pub mint: Pubkey,
    pub destination: Pubkey,
    pub amount: u64,
    pub signed: bool,
}

/// The single `TransferChecked` of an SPL payment (Token or Token-2022).
pub fn spl_transfer(tx: &Transaction) -> Option<SplTransfer> {
    let m = &tx.message;
    let programs = [
        Pubkey::known(TOKEN_PROGRAM),
        Pubkey::known(TOKEN_2022_PROGRAM),
    ];
    let mut found = m.instructions.iter().filter(|ix| {
        programs.contains(&m.program_of(ix)) && ix.data.len() == 10 && ix.data[0] == 12
    });
    let ix = found.next()?;
    if found.next().is_some() {
        return None;
    }
    let (_, mint) = m.account_of(ix, 1)?;
    let (_, destination) = m.account_of(ix, 2)?;
    let (authority_i, authority) = m.account_of(ix, 3)?;
    let mut amount = [0u8; 8];
    amount.copy_from_slice(&ix.data[1..9]);
    Some(SplTransfer {
        authority,
        mint,
        destination,
        amount: u64::from_le_bytes(amount),
        signed: m.is_signer(authority_i) && tx.signed_by(authority_i),
    })
}

/// The `transaction` of an SVM `exact` payload (`{"transaction": "<base64>"}`).
pub fn payload_transaction(payload: &serde_json::Value) -> Result<Transaction, Refusal> {
    let text = payload
        .get("transaction")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| {
            refuse(
                FailureReason::SvmTransaction,
                "the payload has no transaction (base64)",
            )
        })?;
    Transaction::from_base64(text).map_err(|e| refuse(FailureReason::SvmTransaction, e))
}
