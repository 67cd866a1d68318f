//! argon2id hashes without a fresh 19 MiB allocation per hash: each thread that hashes keeps
//! one block buffer and reuses it. Allocated anew each time (as `argon2`'s own
//! `hash_password` does), the freed buffers stayed with the allocator — the process grew by
//! 19 MiB per sign-in, measured at 332 MiB after 20 failed ones — so that a flood of
//! sign-ins grew it without bound. Hashes are standard PHC strings either way.

use std::cell::RefCell;

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{Output, ParamsString, PasswordHash, SaltString};
use argon2::{Algorithm, Argon2, Block, Params, Version};

/// The most memory a stored hash may ask for, in KiB: more is refused, not spent.
const MAX_M_COST: u32 = 256 * 1024;

thread_local! {
    static BLOCKS: RefCell<Vec<Block>> = const { RefCell::new(Vec::new()) };
}

/// argon2 of `password` and `salt` into `out`, in this thread's buffer (wiped after).
fn hash_into(
    argon: &Argon2<'_>,
    params: &Params,
    password: &[u8],
    salt: &[u8],
    out: &mut [u8],
) -> Result<(), String> {
    if params.m_cost() > MAX_M_COST {
        return Err(format!(
            "a hash asking for {} KiB is refused",
            params.m_cost()
        ));
    }
    BLOCKS.with(|blocks| {
        let mut blocks = blocks.borrow_mut();
        let needed = params.block_count();
        if blocks.len() < needed {
            *blocks = vec![Block::default(); needed];
        }
        let done = argon
            .hash_password_into_with_memory(password, salt, out, &mut blocks[..needed])
            .map_err(|e| format!("cannot hash the password: {e}"));
        // Nothing derived from a password stays in memory between hashes.
        blocks[..needed].fill(Block::default());
        done
    })
}

/// An argon2id PHC string for the password (salted; slow on purpose). Whether the
/// password is good enough is `check_password`'s to say.
pub fn hash_password(password: &str) -> Result<String, String> {
    let salt = SaltString::generate(&mut OsRng);
    let params = Params::default();
    let argon = Argon2::new(Algorithm::Argon2id, Version::V0x13, params.clone());
    let mut salt_bytes = [0u8; 64];
    let salt_bytes = salt
        .decode_b64(&mut salt_bytes)
        .map_err(|e| e.to_string())?;
    let mut out = [0u8; Params::DEFAULT_OUTPUT_LEN];
    hash_into(&argon, &params, password.as_bytes(), salt_bytes, &mut out)?;
    let hash = PasswordHash {
        algorithm: Algorithm::Argon2id.ident(),
        version: Some(Version::V0x13.into()),
        params: ParamsString::try_from(&params).map_err(|e| e.to_string())?,
        salt: Some(salt.as_salt()),
        hash: Some(Output::new(&out).map_err(|e| e.to_string())?),
    };
    Ok(hash.to_string())
}

/// Whether the password matches the stored hash (false for a malformed hash).
pub fn verify_password(password: &str, hash: &str) -> bool {
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    let (Some(salt), Some(expected)) = (parsed.salt, parsed.hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params)) = (
        Algorithm::try_from(parsed.algorithm),
        Params::try_from(&parsed),
    ) else {
        return false;
    };
    let version = parsed
        .version
        .map_or(Ok(Version::default()), Version::try_from)
        .unwrap_or(Version::default());
    let argon = Argon2::new(algorithm, version, params.clone());
    let mut salt_bytes = [0u8; 64];
    let Ok(salt_bytes) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    let mut out = vec![0u8; expected.len()];
    if hash_into(&argon, &params, password.as_bytes(), salt_bytes, &mut out).is_err() {
        return false;
    }
    // `Output`'s comparison takes the same time whatever differs.
    Output::new(&out).is_ok_and(|computed| computed == expected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::password_hash::{PasswordHasher, PasswordVerifier};

    #[test]
    fn hashes_are_standard_phc_strings_both_ways() {
        let ours = hash_password("correct horse battery").unwrap();
        assert!(
            ours.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
            "{ours}"
        );
        let parsed = PasswordHash::new(&ours).unwrap();
        assert!(Argon2::default()
            .verify_password(b"correct horse battery", &parsed)
            .is_ok());
        let salt = SaltString::generate(&mut OsRng);
        let theirs = Argon2::default()
            .hash_password(b"correct horse battery", &salt)
            .unwrap()
            .to_string();
        assert!(verify_password("correct horse battery", &theirs));
        assert!(!verify_password("correct horse battery!", &theirs));
        assert!(!verify_password(
            "x",
            "$argon2id$v=19$m=99999999,t=2,p=1$c2FsdHNhbHQ$aGFzaA"
        ));
    }
}
