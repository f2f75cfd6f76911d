//! Building transactions: compiling instructions into a message, and the instructions an
//! x402 payment uses.

use crate::svm::{
    COMPUTE_BUDGET_PROGRAM, Instruction, MEMO_PROGRAM, Message, Pubkey, SYSTEM_PROGRAM,
};

/// An instruction before compilation: its program, accounts and data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInstruction {
    pub program: Pubkey,
    /// (account, signer, writable)
    pub accounts: Vec<(Pubkey, bool, bool)>,
    pub data: Vec<u8>,
}

/// A v0 message (no lookup tables) for `instructions`, paid for by `fee_payer`: keys
/// ordered as the runtime wants them (writable signers, read-only signers, writable,
/// read-only), the fee payer first.
pub fn compile(fee_payer: Pubkey, instructions: &[NewInstruction], blockhash: [u8; 32]) -> Message {
    // (key, signer, writable), merged over every use.
    let mut metas: Vec<(Pubkey, bool, bool)> = vec![(fee_payer, true, true)];
    let mut add = |k: Pubkey, s: bool, w: bool| match metas.iter_mut().find(|m| m.0 == k) {
        Some(m) => {
            m.1 |= s;
            m.2 |= w;
        }
        None => metas.push((k, s, w)),
    };
    for ix in instructions {
        for (k, s, w) in &ix.accounts {
            add(*k, *s, *w);
        }
        add(ix.program, false, false);
    }
    // Stable: the fee payer (a writable signer) stays first.
    let rank = |(_, s, w): &(Pubkey, bool, bool)| match (s, w) {
        (true, true) => 0,
        (true, false) => 1,
        (false, true) => 2,
        (false, false) => 3,
    };
    metas.sort_by_key(rank);
    let count = |r: u8| metas.iter().filter(|m| rank(m) == r).count();
    let keys: Vec<Pubkey> = metas.iter().map(|m| m.0).collect();
    let index = |k: &Pubkey| keys.iter().position(|x| x == k).unwrap_or(0) as u8;
    Message {
        versioned: true,
        num_required_signatures: (count(0) + count(1)) as u8,
        num_readonly_signed: count(1) as u8,
        num_readonly_unsigned: count(3) as u8,
        recent_blockhash: blockhash,
        instructions: instructions
            .iter()
            .map(|ix| Instruction {
                program: index(&ix.program),
                accounts: ix.accounts.iter().map(|(k, _, _)| index(k)).collect(),
                data: ix.data.clone(),
            })
            .collect(),
        account_keys: keys,
        lookups: Vec::new(),
    }
}

/// `ComputeBudget::SetComputeUnitLimit`.
pub fn set_compute_unit_limit(units: u32) -> NewInstruction {
    let mut data = vec![2u8];
    data.extend(units.to_le_bytes());
    NewInstruction {
        program: Pubkey::known(COMPUTE_BUDGET_PROGRAM),
        accounts: Vec::new(),
        data,
    }
}

/// `ComputeBudget::SetComputeUnitPrice` (micro-lamports per unit).
pub fn set_compute_unit_price(micro_lamports: u64) -> NewInstruction {
    let mut data = vec![3u8];
    data.extend(micro_lamports.to_le_bytes());
    NewInstruction {
        program: Pubkey::known(COMPUTE_BUDGET_PROGRAM),
        accounts: Vec::new(),
        data,
    }
}

/// `System::Transfer` of `lamports` from `from` (a signer) to `to`.
pub fn system_transfer(from: Pubkey, to: Pubkey, lamports: u64) -> NewInstruction {
    let mut data = 2u32.to_le_bytes().to_vec();
    data.extend(lamports.to_le_bytes());
    NewInstruction {
        program: Pubkey::known(SYSTEM_PROGRAM),
        accounts: vec![(from, true, true), (to, false, true)],
        data,
    }
}

/// SPL `TransferChecked` of `amount` (with `decimals`) from token account `source` to
/// token account `destination`, authorized by `owner`.
pub fn transfer_checked(
    token_program: Pubkey,
    source: Pubkey,
    mint: Pubkey,
    destination: Pubkey,
    owner: Pubkey,
    amount: u64,
    decimals: u8,
) -> NewInstruction {
    let mut data = vec![12u8];
    data.extend(amount.to_le_bytes());
    data.push(decimals);
    NewInstruction {
        program: token_program,
        accounts: vec![
            (source, false, true),
            (mint, false, false),
            (destination, false, true),
            (owner, true, false),
        ],
        data,
    }
}

/// A memo (the reference client's per-payment nonce: two payments of one amount are
/// two transactions).
pub fn memo(text: &[u8]) -> NewInstruction {
    NewInstruction {
        program: Pubkey::known(MEMO_PROGRAM),
        accounts: Vec::new(),
        data: text.to_vec(),
    }
}
