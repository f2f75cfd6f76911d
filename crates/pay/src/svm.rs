//! Solana for x402: the wire transaction (legacy and v0), what an `exact` SVM payment
//! pays (an SPL `TransferChecked`, settled by the facilitator; or native SOL, our own
//! extension: a system transfer the payer signs and pays the fee of, which we verify
//! and broadcast ourselves), and the associated token account a payee is paid at.
//!
//! Parsing is strict: every byte of a transaction is accounted for, and a payment is
//! read through these types only, so two encodings of one transaction are one payment.

use std::fmt;

use ed25519_dalek::{Signature, VerifyingKey};
use sha2::{Digest, Sha256};

/// The largest transaction Solana accepts (one packet).
pub const MAX_TRANSACTION_BYTES: usize = 1232;

pub const SYSTEM_PROGRAM: &str = "11111111111111111111111111111111";
pub const COMPUTE_BUDGET_PROGRAM: &str = "ComputeBudget111111111111111111111111111111";
pub const TOKEN_PROGRAM: &str = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA";
pub const TOKEN_2022_PROGRAM: &str = "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb";
pub const ASSOCIATED_TOKEN_PROGRAM: &str = "ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL";
pub const MEMO_PROGRAM: &str = "MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr";

/// Native SOL's decimals: amounts are lamports.
pub const SOL_DECIMALS: u32 = 9;
/// What a native SOL rail names as its asset.
pub const NATIVE_SOL_ASSET: &str = "native";
/// The most compute units a native SOL payment may ask for (a transfer takes 150; the
/// payer pays its own fee, so this only keeps the transaction what it says it is).
pub const MAX_COMPUTE_UNIT_LIMIT: u32 = 200_000;
/// The longest memo a payment may carry (the reference client's limit).
pub const MAX_MEMO_BYTES: usize = 256;

/// A 32-byte Solana address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pubkey(pub [u8; 32]);

impl Pubkey {
    pub fn from_base58(s: &str) -> Option<Pubkey> {
        let mut out = [0u8; 32];
        match bs58::decode(s).onto(&mut out) {
            Ok(32) => Some(Pubkey(out)),
            _ => None,
        }
    }

    /// A well-known program id (a constant of this module).
    fn known(s: &str) -> Pubkey {
        Pubkey::from_base58(s).unwrap_or(Pubkey([0; 32]))
    }

    pub fn to_base58(&self) -> String {
        bs58::encode(self.0).into_string()
    }

    /// Whether the bytes are a point on the ed25519 curve (a key someone may hold):
    /// program-derived addresses are chosen off the curve.
    pub fn is_on_curve(&self) -> bool {
        curve25519_dalek::edwards::CompressedEdwardsY(self.0)
            .decompress()
            .is_some()
    }

    /// `find_program_address`: the first bump from 255 down whose address is off the
    /// curve.
    pub fn find_program_address(seeds: &[&[u8]], program: &Pubkey) -> Option<(Pubkey, u8)> {
        (0..=255u8).rev().find_map(|bump| {
            let mut h = Sha256::new();
            for s in seeds {
                h.update(s);
            }
            h.update([bump]);
            h.update(program.0);
            h.update(b"ProgramDerivedAddress");
            let candidate = Pubkey(h.finalize().into());
            (!candidate.is_on_curve()).then_some((candidate, bump))
        })
    }

    /// The associated token account of `owner` for `mint` under `token_program`.
    pub fn associated_token_account(
        owner: &Pubkey,
        mint: &Pubkey,
        token_program: &Pubkey,
    ) -> Option<Pubkey> {
        Pubkey::find_program_address(
            &[&owner.0, &token_program.0, &mint.0],
            &Pubkey::known(ASSOCIATED_TOKEN_PROGRAM),
        )
        .map(|(a, _)| a)
    }
}

impl fmt::Display for Pubkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_base58())
    }
}

impl fmt::Debug for Pubkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pubkey({self})")
    }
}

/// One instruction of a compiled message: indices into the message's account keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    pub program: u8,
    pub accounts: Vec<u8>,
    pub data: Vec<u8>,
}

/// A compiled message (legacy, or v0 without looked-up accounts being resolved).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// v0 (`true`) or legacy.
    pub versioned: bool,
    pub num_required_signatures: u8,
    pub num_readonly_signed: u8,
    pub num_readonly_unsigned: u8,
    pub account_keys: Vec<Pubkey>,
    pub recent_blockhash: [u8; 32],
    pub instructions: Vec<Instruction>,
    /// v0 address-table lookups, kept as raw entries (a payment may use none).
    pub lookups: Vec<(Pubkey, Vec<u8>, Vec<u8>)>,
}

/// A transaction as sent on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    pub signatures: Vec<[u8; 64]>,
    pub message: Message,
    /// The serialized message: what every signature signs.
    pub message_bytes: Vec<u8>,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.bytes.len())
            .ok_or("the transaction ends early")?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    /// A compact-u16 ("shortvec") length, in its one canonical encoding.
    fn len(&mut self) -> Result<usize, String> {
        let mut value: usize = 0;
        for i in 0..3 {
            let b = self.byte()?;
            value |= usize::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                if i > 0 && b == 0 {
                    return Err("a length is not in its shortest encoding".into());
                }
                if value > usize::from(u16::MAX) {
                    return Err("a length overflows 16 bits".into());
                }
                return Ok(value);
            }
        }
        Err("a length is longer than three bytes".into())
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }
}

fn write_len(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let mut b = (n & 0x7f) as u8;
        n >>= 7;
        if n != 0 {
            b |= 0x80;
        }
        out.push(b);
        if n == 0 {
            break;
        }
    }
}

impl Message {
    fn decode(r: &mut Reader<'_>) -> Result<Message, String> {
        let first = r.byte()?;
        let (versioned, num_required_signatures) = if first & 0x80 != 0 {
            if first & 0x7f != 0 {
                return Err(format!(
                    "message version {} is not supported (legacy or v0)",
                    first & 0x7f
                ));
            }
            (true, r.byte()?)
        } else {
            (false, first)
        };
        let num_readonly_signed = r.byte()?;
        let num_readonly_unsigned = r.byte()?;
        let n = r.len()?;
        let mut account_keys = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            account_keys.push(Pubkey(r.array::<32>()?));
        }
        let recent_blockhash = r.array::<32>()?;
        let n = r.len()?;
        let mut instructions = Vec::with_capacity(n.min(64));
        for _ in 0..n {
            let program = r.byte()?;
            let k = r.len()?;
            let accounts = r.take(k)?.to_vec();
            let k = r.len()?;
            let data = r.take(k)?.to_vec();
            instructions.push(Instruction {
                program,
                accounts,
                data,
            });
        }
        let mut lookups = Vec::new();
        if versioned {
            let n = r.len()?;
            for _ in 0..n {
                let table = Pubkey(r.array::<32>()?);
                let k = r.len()?;
                let writable = r.take(k)?.to_vec();
                let k = r.len()?;
                let readonly = r.take(k)?.to_vec();
                lookups.push((table, writable, readonly));
            }
        }
        let m = Message {
            versioned,
            num_required_signatures,
            num_readonly_signed,
            num_readonly_unsigned,
            account_keys,
            recent_blockhash,
            instructions,
            lookups,
        };
        m.check()?;
        Ok(m)
    }

    /// What the runtime would refuse anyway: headers and indices out of range.
    fn check(&self) -> Result<(), String> {
        let keys = self.account_keys.len();
        let signed = usize::from(self.num_required_signatures);
        if signed == 0 || signed > keys {
            return Err("the message names no fee payer".into());
        }
        if usize::from(self.num_readonly_signed) >= signed
            || usize::from(self.num_readonly_unsigned) > keys - signed
        {
            return Err("the message header does not fit its account keys".into());
        }
        let looked_up: usize = self.lookups.iter().map(|(_, w, r)| w.len() + r.len()).sum();
        let total = keys + looked_up;
        for ix in &self.instructions {
            if usize::from(ix.program) >= keys {
                return Err("an instruction's program is not among the account keys".into());
            }
            if ix.accounts.iter().any(|a| usize::from(*a) >= total) {
                return Err("an instruction names an account the message does not have".into());
            }
        }
        Ok(())
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        if self.versioned {
            out.push(0x80);
        }
        out.extend([
            self.num_required_signatures,
            self.num_readonly_signed,
            self.num_readonly_unsigned,
        ]);
        write_len(&mut out, self.account_keys.len());
        for k in &self.account_keys {
            out.extend(k.0);
        }
        out.extend(self.recent_blockhash);
        write_len(&mut out, self.instructions.len());
        for ix in &self.instructions {
            out.push(ix.program);
            write_len(&mut out, ix.accounts.len());
            out.extend(&ix.accounts);
            write_len(&mut out, ix.data.len());
            out.extend(&ix.data);
        }
        if self.versioned {
            write_len(&mut out, self.lookups.len());
            for (table, w, r) in &self.lookups {
                out.extend(table.0);
                write_len(&mut out, w.len());
                out.extend(w);
                write_len(&mut out, r.len());
                out.extend(r);
            }
        }
        out
    }

    pub fn fee_payer(&self) -> Pubkey {
        self.account_keys[0]
    }

    pub fn is_signer(&self, index: usize) -> bool {
        index < usize::from(self.num_required_signatures)
    }

    pub fn is_writable(&self, index: usize) -> bool {
        let signed = usize::from(self.num_required_signatures);
        let keys = self.account_keys.len();
        if index < signed {
            index < signed - usize::from(self.num_readonly_signed)
        } else {
            index < keys - usize::from(self.num_readonly_unsigned)
        }
    }

    /// The program an instruction calls.
    pub fn program_of(&self, ix: &Instruction) -> Pubkey {
        self.account_keys[usize::from(ix.program)]
    }

    /// The `n`th account of an instruction, when it is one of the static keys.
    pub fn account_of(&self, ix: &Instruction, n: usize) -> Option<(usize, Pubkey)> {
        let i = usize::from(*ix.accounts.get(n)?);
        self.account_keys.get(i).map(|k| (i, *k))
    }
}

impl Transaction {
    pub fn decode(bytes: &[u8]) -> Result<Transaction, String> {
        if bytes.len() > MAX_TRANSACTION_BYTES {
            return Err(format!(
                "the transaction is {} bytes; Solana takes at most {MAX_TRANSACTION_BYTES}",
                bytes.len()
            ));
        }
        let mut r = Reader { bytes, at: 0 };
        let n = r.len()?;
        let mut signatures = Vec::with_capacity(n.min(16));
        for _ in 0..n {
            signatures.push(r.array::<64>()?);
        }
        let start = r.at;
        let message = Message::decode(&mut r)?;
        if r.at != bytes.len() {
            return Err("bytes follow the transaction".into());
        }
        if signatures.len() != usize::from(message.num_required_signatures) {
            return Err(format!(
                "the transaction carries {} signatures for {} signers",
                signatures.len(),
                message.num_required_signatures
            ));
        }
        Ok(Transaction {
            signatures,
            message_bytes: bytes[start..].to_vec(),
            message,
        })
    }

    pub fn from_base64(text: &str) -> Result<Transaction, String> {
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| format!("the transaction is not base64: {e}"))?;
        Transaction::decode(&bytes)
    }

    /// An unsigned transaction for `message` (every signature zero until signed).
    pub fn unsigned(message: Message) -> Transaction {
        let message_bytes = message.encode();
        Transaction {
            signatures: vec![[0u8; 64]; usize::from(message.num_required_signatures)],
            message,
            message_bytes,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.message_bytes.len() + 65 * self.signatures.len());
        write_len(&mut out, self.signatures.len());
        for s in &self.signatures {
            out.extend(s);
        }
        out.extend(&self.message_bytes);
        out
    }

    pub fn to_base64(&self) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(self.encode())
    }

    /// Whether signer `index` signed this message (strict Ed25519: no malleable copies).
    pub fn signed_by(&self, index: usize) -> bool {
        let (Some(key), Some(sig)) = (
            self.message.account_keys.get(index),
            self.signatures.get(index),
        ) else {
            return false;
        };
        if index >= usize::from(self.message.num_required_signatures) {
            return false;
        }
        let Ok(vk) = VerifyingKey::from_bytes(&key.0) else {
            return false;
        };
        vk.verify_strict(&self.message_bytes, &Signature::from_bytes(sig))
            .is_ok()
    }

    /// Places `signature` for `signer` (a key among the required signers).
    pub fn sign_with(&mut self, signer: &Pubkey, signature: [u8; 64]) -> Result<(), String> {
        let i = self.message.account_keys[..usize::from(self.message.num_required_signatures)]
            .iter()
            .position(|k| k == signer)
            .ok_or_else(|| format!("{signer} is not a signer of this transaction"))?;
        self.signatures[i] = signature;
        Ok(())
    }

    /// The transaction id: the fee payer's signature, in base58.
    pub fn id(&self) -> String {
        bs58::encode(self.signatures[0]).into_string()
    }

    /// sha256 of the message: one value for one transaction, however it is encoded
    /// and whoever has signed it so far.
    pub fn message_hash_hex(&self) -> String {
        hex_lower(&Sha256::digest(&self.message_bytes))
    }
}

fn hex_lower(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

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

/// Why a transaction is not the payment it must be: an x402 reason code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

fn refuse(reason: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        reason,
        message: message.into(),
    }
}

pub const REASON_TRANSACTION: &str = "invalid_exact_svm_payload_transaction";
pub const REASON_SIGNATURE: &str = "invalid_exact_svm_payload_signature_invalid";
pub const REASON_INSTRUCTIONS: &str = "invalid_exact_svm_payload_transaction_instructions";
pub const REASON_NO_TRANSFER: &str = "invalid_exact_svm_payload_no_transfer_instruction";
pub const REASON_RECIPIENT: &str = "invalid_exact_svm_payload_recipient_mismatch";
pub const REASON_AMOUNT: &str = "invalid_exact_svm_payload_amount_mismatch";
pub const REASON_MINT: &str = "invalid_exact_svm_payload_mint_mismatch";
pub const REASON_SIMULATION: &str = "invalid_exact_svm_transaction_simulation_failed";
pub const REASON_FAILED: &str = "invalid_exact_svm_transaction_failed";
/// A transaction that already paid for a purchase (the reference facilitator's word).
pub const REASON_DUPLICATE: &str = "duplicate_settlement";

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
    let m = &tx.message;
    if !m.lookups.is_empty() {
        return Err(refuse(
            REASON_TRANSACTION,
            "a native SOL payment may not use address lookup tables",
        ));
    }
    if m.num_required_signatures != 1 {
        return Err(refuse(
            REASON_TRANSACTION,
            format!(
                "a native SOL payment has one signer, the payer (who pays its fee); this one has {}",
                m.num_required_signatures
            ),
        ));
    }
    if !tx.signed_by(0) {
        return Err(refuse(
            REASON_SIGNATURE,
            "the payer's signature does not verify over the transaction",
        ));
    }
    let payer = m.fee_payer();
    let (system, budget, memo_program) = (
        Pubkey::known(SYSTEM_PROGRAM),
        Pubkey::known(COMPUTE_BUDGET_PROGRAM),
        Pubkey::known(MEMO_PROGRAM),
    );
    let (mut transfer, mut limit, mut price, mut memos) = (None, false, false, 0);
    for ix in &m.instructions {
        let program = m.program_of(ix);
        if program == budget {
            match ix.data.first() {
                Some(2) if !limit && ix.data.len() == 5 => {
                    limit = true;
                    let units =
                        u32::from_le_bytes([ix.data[1], ix.data[2], ix.data[3], ix.data[4]]);
                    if units > MAX_COMPUTE_UNIT_LIMIT {
                        return Err(refuse(
                            REASON_INSTRUCTIONS,
                            format!(
                                "a compute unit limit of {units} (at most {MAX_COMPUTE_UNIT_LIMIT})"
                            ),
                        ));
                    }
                }
                Some(3) if !price && ix.data.len() == 9 => price = true,
                _ => {
                    return Err(refuse(
                        REASON_INSTRUCTIONS,
                        "only one SetComputeUnitLimit and one SetComputeUnitPrice may accompany the transfer",
                    ));
                }
            }
        } else if program == memo_program {
            memos += 1;
            if memos > 1 || ix.data.len() > MAX_MEMO_BYTES {
                return Err(refuse(
                    REASON_INSTRUCTIONS,
                    format!("at most one memo of at most {MAX_MEMO_BYTES} bytes"),
                ));
            }
        } else if program == system {
            if transfer.is_some() {
                return Err(refuse(REASON_INSTRUCTIONS, "more than one system transfer"));
            }
            let is_transfer = ix.data.len() == 12 && ix.data[..4] == 2u32.to_le_bytes();
            let (Some((from_i, from)), Some((to_i, to))) =
                (m.account_of(ix, 0), m.account_of(ix, 1))
            else {
                return Err(refuse(
                    REASON_INSTRUCTIONS,
                    "a system instruction without its accounts",
                ));
            };
            if !is_transfer || ix.accounts.len() != 2 {
                return Err(refuse(
                    REASON_INSTRUCTIONS,
                    "the only system instruction allowed is Transfer",
                ));
            }
            if from_i != 0 || from != payer || !m.is_writable(to_i) {
                return Err(refuse(
                    REASON_INSTRUCTIONS,
                    "the transfer must move the payer's (the fee payer's) own lamports",
                ));
            }
            let mut amount = [0u8; 8];
            amount.copy_from_slice(&ix.data[4..12]);
            transfer = Some(NativeTransfer {
                payer,
                to,
                lamports: u64::from_le_bytes(amount),
            });
        } else {
            return Err(refuse(
                REASON_INSTRUCTIONS,
                format!("program {program} has no place in a native SOL payment"),
            ));
        }
    }
    let t =
        transfer.ok_or_else(|| refuse(REASON_NO_TRANSFER, "the transaction transfers no SOL"))?;
    if t.to == t.payer {
        return Err(refuse(REASON_RECIPIENT, "the payer pays itself"));
    }
    Ok(t)
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
                REASON_TRANSACTION,
                "the payload has no transaction (base64)",
            )
        })?;
    Transaction::from_base64(text).map_err(|e| refuse(REASON_TRANSACTION, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use umpire_core::signer::{LocalSigner, Signer as _};

    fn key(seed: u8) -> (LocalSigner, Pubkey) {
        let s = LocalSigner::from_seed([seed; 32]);
        let p = Pubkey(s.public_key());
        (s, p)
    }

    fn signed(signer: &LocalSigner, message: Message) -> Transaction {
        let mut tx = Transaction::unsigned(message);
        let sig = signer.sign(&tx.message_bytes);
        tx.sign_with(&Pubkey(signer.public_key()), sig)
            .expect("signer");
        tx
    }

    #[test]
    fn base58_round_trips_and_refuses_other_lengths() {
        let p = Pubkey::from_base58(TOKEN_PROGRAM).expect("program id");
        assert_eq!(p.to_base58(), TOKEN_PROGRAM);
        assert_eq!(Pubkey::known(SYSTEM_PROGRAM).0, [0u8; 32]);
        assert!(Pubkey::from_base58("abc").is_none());
        assert!(Pubkey::from_base58("0OIl").is_none());
    }

    #[test]
    fn associated_token_accounts_match_the_reference() {
        // @solana-program/token's findAssociatedTokenPda for this owner and USDC.
        let owner =
            Pubkey::from_base58("9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM").expect("owner");
        let mint =
            Pubkey::from_base58("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v").expect("mint");
        let token = Pubkey::known(TOKEN_PROGRAM);
        let seeds: [&[u8]; 3] = [&owner.0, &token.0, &mint.0];
        let (ata, bump) =
            Pubkey::find_program_address(&seeds, &Pubkey::known(ASSOCIATED_TOKEN_PROGRAM))
                .expect("pda");
        assert_eq!(
            ata.to_base58(),
            "FGETo8T8wMcN2wCjav8VK6eh3dLk63evNDPxzLSJra8B"
        );
        assert_eq!(bump, 254);
        assert!(!ata.is_on_curve());
        assert!(owner.is_on_curve());
    }

    #[test]
    fn a_native_transfer_round_trips_and_verifies() {
        let (payer_key, payer) = key(1);
        let (_, to) = key(2);
        let m = compile(
            payer,
            &[
                set_compute_unit_limit(1_000),
                set_compute_unit_price(1),
                system_transfer(payer, to, 33_833_334),
                memo(b"nonce-1"),
            ],
            [7; 32],
        );
        let tx = signed(&payer_key, m);
        let back = Transaction::from_base64(&tx.to_base64()).expect("decodes");
        assert_eq!(back, tx);
        let t = native_transfer(&back).expect("a native payment");
        assert_eq!((t.payer, t.to, t.lamports), (payer, to, 33_833_334));
        assert_eq!(back.id(), bs58::encode(back.signatures[0]).into_string());
    }

    #[test]
    fn native_payments_that_are_something_else_are_refused() {
        let (payer_key, payer) = key(1);
        let (other_key, other) = key(3);
        let (_, to) = key(2);
        let reason = |tx: &Transaction| native_transfer(tx).err().map(|r| r.reason);
        // Unsigned, or signed by someone else.
        let m = compile(payer, &[system_transfer(payer, to, 5)], [7; 32]);
        assert_eq!(
            reason(&Transaction::unsigned(m.clone())),
            Some(REASON_SIGNATURE)
        );
        let mut forged = Transaction::unsigned(m);
        forged.signatures[0] = other_key.sign(&forged.message_bytes);
        assert_eq!(reason(&forged), Some(REASON_SIGNATURE));
        // Moving someone else's lamports (a second signer), or two transfers.
        let two_signers = compile(payer, &[system_transfer(other, to, 5)], [7; 32]);
        assert_eq!(
            reason(&signed(&payer_key, two_signers)),
            Some(REASON_TRANSACTION)
        );
        let twice = compile(
            payer,
            &[system_transfer(payer, to, 5), system_transfer(payer, to, 5)],
            [7; 32],
        );
        assert_eq!(
            reason(&signed(&payer_key, twice)),
            Some(REASON_INSTRUCTIONS)
        );
        // Another program alongside; no transfer at all; a compute limit too high.
        let (_, mint) = key(9);
        let extra = compile(
            payer,
            &[
                system_transfer(payer, to, 5),
                transfer_checked(Pubkey::known(TOKEN_PROGRAM), to, mint, to, payer, 1, 6),
            ],
            [7; 32],
        );
        assert_eq!(
            reason(&signed(&payer_key, extra)),
            Some(REASON_INSTRUCTIONS)
        );
        let none = compile(payer, &[memo(b"x")], [7; 32]);
        assert_eq!(reason(&signed(&payer_key, none)), Some(REASON_NO_TRANSFER));
        let greedy = compile(
            payer,
            &[
                set_compute_unit_limit(1_400_000),
                system_transfer(payer, to, 5),
            ],
            [7; 32],
        );
        assert_eq!(
            reason(&signed(&payer_key, greedy)),
            Some(REASON_INSTRUCTIONS)
        );
        let _ = other;
    }

    #[test]
    fn decoding_is_strict() {
        let (payer_key, payer) = key(1);
        let (_, to) = key(2);
        let tx = signed(
            &payer_key,
            compile(payer, &[system_transfer(payer, to, 5)], [7; 32]),
        );
        let bytes = tx.encode();
        // Trailing bytes, a truncated copy, a missing signature.
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Transaction::decode(&longer).is_err());
        assert!(Transaction::decode(&bytes[..bytes.len() - 1]).is_err());
        let mut unsigned = bytes.clone();
        unsigned[0] = 0;
        assert!(Transaction::decode(&unsigned).is_err());
        // A length spelled in two bytes where one would do.
        let mut padded = vec![0x81, 0x00];
        padded.extend(&bytes[1..]);
        assert!(Transaction::decode(&padded).is_err());
        // An instruction whose program index is out of range.
        let mut m = tx.message.clone();
        m.instructions[0].program = 99;
        assert!(Transaction::decode(&Transaction::unsigned(m).encode()).is_err());
        assert!(Transaction::decode(&vec![0u8; MAX_TRANSACTION_BYTES + 1]).is_err());
    }

    #[test]
    fn the_message_hash_ignores_signatures() {
        let (payer_key, payer) = key(1);
        let (_, to) = key(2);
        let m = compile(payer, &[system_transfer(payer, to, 5)], [7; 32]);
        let unsigned = Transaction::unsigned(m.clone());
        let signed_tx = signed(&payer_key, m);
        assert_eq!(unsigned.message_hash_hex(), signed_tx.message_hash_hex());
    }

    #[test]
    fn an_spl_transfer_names_its_authority() {
        let (owner_key, owner) = key(4);
        let (_, fee_payer) = key(5);
        let (_, mint) = key(6);
        let (_, payee) = key(7);
        let token = Pubkey::known(TOKEN_PROGRAM);
        let source = Pubkey::associated_token_account(&owner, &mint, &token).expect("ata");
        let dest = Pubkey::associated_token_account(&payee, &mint, &token).expect("ata");
        let m = compile(
            fee_payer,
            &[transfer_checked(
                token, source, mint, dest, owner, 1_000_000, 6,
            )],
            [7; 32],
        );
        let mut tx = Transaction::unsigned(m);
        let before = spl_transfer(&tx).expect("a transfer");
        assert!(!before.signed);
        let sig = owner_key.sign(&tx.message_bytes);
        tx.sign_with(&owner, sig).expect("owner signs");
        let t = spl_transfer(&tx).expect("a transfer");
        assert_eq!(
            (t.authority, t.mint, t.destination, t.amount),
            (owner, mint, dest, 1_000_000)
        );
        assert!(
            t.signed,
            "the owner's signature verifies; the fee payer's is not needed"
        );
        assert_eq!(tx.message.fee_payer(), fee_payer);
    }
}
