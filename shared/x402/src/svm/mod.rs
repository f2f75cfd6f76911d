//! Solana for x402: the wire transaction (legacy and v0), what an `exact` SVM payment
//! pays (an SPL `TransferChecked`, settled by the facilitator; or native SOL, our own
//! extension: a system transfer the payer signs and pays the fee of, which we verify
//! and broadcast ourselves), and the associated token account a payee is paid at.
//!
//! Parsing is strict: every byte of a transaction is accounted for, and a payment is
//! read through these types only, so two encodings of one transaction are one payment.

mod compose;
mod transfer;
mod wire;

pub use compose::{
    NewInstruction, compile, memo, set_compute_unit_limit, set_compute_unit_price, system_transfer,
    transfer_checked,
};
pub use transfer::{
    NativeTransfer, Refusal, SplTransfer, native_transfer, payload_transaction, spl_transfer,
};

use std::fmt;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reason::FailureReason;
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
            Some(FailureReason::SvmSignature)
        );
        let mut forged = Transaction::unsigned(m);
        forged.signatures[0] = other_key.sign(&forged.message_bytes);
        assert_eq!(reason(&forged), Some(FailureReason::SvmSignature));
        // Moving someone else's lamports (a second signer), or two transfers.
        let two_signers = compile(payer, &[system_transfer(other, to, 5)], [7; 32]);
        assert_eq!(
            reason(&signed(&payer_key, two_signers)),
            Some(FailureReason::SvmTransaction)
        );
        let twice = compile(
            payer,
            &[system_transfer(payer, to, 5), system_transfer(payer, to, 5)],
            [7; 32],
        );
        assert_eq!(
            reason(&signed(&payer_key, twice)),
            Some(FailureReason::SvmInstructions)
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
            Some(FailureReason::SvmInstructions)
        );
        let none = compile(payer, &[memo(b"x")], [7; 32]);
        assert_eq!(
            reason(&signed(&payer_key, none)),
            Some(FailureReason::SvmNoTransfer)
        );
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
            Some(FailureReason::SvmInstructions)
        );
        // docs/paying.md: a memo of at most 256 bytes, once; 257 bytes are refused.
        let memo_of = |n: usize| {
            compile(
                payer,
                &[system_transfer(payer, to, 5), memo(&vec![b'm'; n])],
                [7; 32],
            )
        };
        assert_eq!(MAX_MEMO_BYTES, 256);
        assert!(native_transfer(&signed(&payer_key, memo_of(256))).is_ok());
        assert_eq!(
            reason(&signed(&payer_key, memo_of(257))),
            Some(FailureReason::SvmInstructions)
        );
        // And no address lookup table, whatever it would resolve to.
        let mut looked_up = compile(payer, &[system_transfer(payer, to, 5)], [7; 32]);
        looked_up.lookups.push((to, vec![0], Vec::new()));
        assert_eq!(
            reason(&signed(&payer_key, looked_up)),
            Some(FailureReason::SvmTransaction)
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
