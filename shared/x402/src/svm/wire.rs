//! Solana's wire format: messages and transactions read and written byte for byte (legacy
//! and v0).

use ed25519_dalek::{Signature, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::svm::{Instruction, MAX_TRANSACTION_BYTES, Message, Pubkey, Transaction};

pub(super) struct Reader<'a> {
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

pub(super) fn write_len(out: &mut Vec<u8>, mut n: usize) {
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

pub(super) fn hex_lower(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
