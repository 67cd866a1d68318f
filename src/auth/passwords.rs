//! Which passwords are accepted (pure): long enough once trimmed, of enough different
//! characters, not a run along the keyboard or the alphabet, not one of the passwords
//! everybody tries first, and not the user's own name.

/// The fewest characters a password has (spaces at either end not counted).
pub const MIN_PASSWORD_CHARS: usize = 10;
/// The fewest different characters: `aaaaaaaaaa` and `abababab…` are not passwords.
const MIN_DISTINCT_CHARS: usize = 5;

/// The first guesses of every guessing tool, lower case, with what ends them removed and
/// look-alike digits read as letters (so `Password123!` and `P@ssw0rd` are `password`).
const COMMON: [&str; 34] = [
    "password",
    "passw0rd",
    "passwort",
    "motdepasse",
    "qwerty",
    "qwertz",
    "azerty",
    "letmein",
    "welcome",
    "admin",
    "administrator",
    "changeme",
    "iloveyou",
    "monkey",
    "dragon",
    "football",
    "baseball",
    "sunshine",
    "princess",
    "trustno",
    "master",
    "login",
    "secret",
    "lazarus",
    "rabbitmq",
    "guest",
    "default",
    "abc",
    "test",
    "root",
    "superman",
    "starwars",
    "whatever",
    "freedom",
];

/// Rows of the keyboard and the alphabet, both ways read by [`is_run`].
const RUNS: [&str; 4] = [
    "qwertyuiopasdfghjklzxcvbnm",
    "1234567890",
    "abcdefghijklmnopqrstuvwxyz",
    "01234567890",
];

/// Whether the whole text is a stretch of one of the runs, forwards or backwards.
fn is_run(text: &str) -> bool {
    RUNS.iter().any(|run| {
        let back: String = run.chars().rev().collect();
        run.contains(text) || back.contains(text)
    })
}

/// `Err` with what is wrong with a password for `user`.
pub fn check_password(password: &str, user: &str) -> Result<(), String> {
    let trimmed = password.trim();
    if trimmed.chars().count() < MIN_PASSWORD_CHARS {
        return Err(format!(
            "this password is too short: use at least {MIN_PASSWORD_CHARS} characters (spaces at either end do not count)"
        ));
    }
    let lower = trimmed.to_lowercase();
    let mut distinct: Vec<char> = lower.chars().collect();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < MIN_DISTINCT_CHARS {
        return Err(format!(
            "this password repeats too few characters: use at least {MIN_DISTINCT_CHARS} different characters"
        ));
    }
    let letters: String = lower.chars().filter(|c| c.is_alphanumeric()).collect();
    if is_run(&letters) {
        return Err(
            "this password is a run along the keyboard or the alphabet: choose one that is not"
                .into(),
        );
    }
    // `P@ssw0rd2024!` is `password`: what ends it is dropped, then the digits and signs
    // standing in for letters are read as those letters.
    let core: String = lower
        .trim_end_matches(|c: char| !c.is_alphabetic())
        .chars()
        .map(|c| match c {
            '@' | '4' => 'a',
            '0' => 'o',
            '1' | '!' => 'i',
            '3' => 'e',
            '5' | '$' => 's',
            '7' => 't',
            other => other,
        })
        .filter(|c| c.is_alphanumeric())
        .collect();
    if core.is_empty() || COMMON.contains(&core.as_str()) || is_run(&core) {
        return Err(
            "this password is one of the first every guessing tool tries: choose another".into(),
        );
    }
    let name = user.trim().to_lowercase();
    if name.chars().count() >= 3 && lower.contains(&name) {
        return Err("this password contains the user's name: choose one without it".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_password_is_told_what_is_wrong_with_it_not_a_rule() {
        for weak in [
            "short",
            "aaaaaaaaaaaa",
            "qwertyuiop",
            "password123",
            "carl carl carl",
        ] {
            let err = check_password(weak, "carl").unwrap_err();
            assert!(
                err.starts_with("this password "),
                "{weak:?}: {err:?} reads as a fact about passwords, not this one"
            );
        }
    }

    #[test]
    fn weak_passwords_say_why() {
        for (weak, says) in [
            ("          ", "at least 10"),
            ("  short  ", "at least 10"),
            ("aaaaaaaaaaaa", "different characters"),
            ("abababababab", "different characters"),
            ("qwertyuiop", "run"),
            ("1234567890", "run"),
            ("0987654321", "run"),
            ("abcdefghijk", "run"),
            ("password123", "guessing"),
            ("Password2024!", "guessing"),
            ("P@ssw0rd!!!!", "guessing"),
            ("administrator", "guessing"),
            ("9876543210", "run"),
            ("carl carl carl", "name"),
            ("Carl-is-my-name", "name"),
        ] {
            let err = check_password(weak, "carl").unwrap_err();
            assert!(err.contains(says), "{weak:?}: {err}");
        }
    }

    #[test]
    fn good_passwords_pass() {
        for good in [
            "correct horse battery staple",
            "a long enough password",
            "Tr0ub4dor&3x",
            "kq8#mZ2!vW",
        ] {
            assert_eq!(check_password(good, "carl"), Ok(()), "{good:?}");
        }
    }
}
