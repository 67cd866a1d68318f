//! Users, sessions and API tokens.

use std::time::Instant;

use lazarus::archive::{Actor, Role, TokenSpec};
use time::OffsetDateTime;

use crate::helpers::*;

use super::*;

on_both_backends!(users_sessions_and_tokens_follow_their_accounts);
async fn users_sessions_and_tokens_follow_their_accounts() {
    let (_dir, archive) = archive().await;
    let archive = &*archive;
    let admin = Actor::system("admin");
    const LONG: u64 = 3_600_000;

    // Users: added, changed (the password kept unless given), listed by name.
    archive
        .put_user("zoe", Some("hash-1"), Role::Operator, &[], &admin)
        .await
        .unwrap();
    archive
        .put_user("bob", None, Role::Viewer, &[], &admin)
        .await
        .unwrap();
    archive
        .put_user("zoe", None, Role::Admin, &[], &admin)
        .await
        .unwrap();
    let zoe = archive.user("zoe").await.unwrap().unwrap();
    assert_eq!(
        (zoe.role, zoe.password_hash.as_deref()),
        (Role::Admin, Some("hash-1"))
    );
    assert_eq!(archive.user("nobody").await.unwrap(), None);
    let names: Vec<String> = archive
        .users()
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.name)
        .collect();
    assert_eq!(names, ["bob", "zoe"]);

    // Sessions: found while used, ended when idle too long or too old.
    archive.create_session("s-zoe", "zoe", None).await.unwrap();
    let user = archive.session_user("s-zoe", LONG, LONG).await.unwrap();
    assert_eq!(user.map(|u| u.name).as_deref(), Some("zoe"));
    assert_eq!(
        archive.session_user("s-none", LONG, LONG).await.unwrap(),
        None
    );
    archive.create_session("s-idle", "zoe", None).await.unwrap();
    archive.create_session("s-old", "zoe", None).await.unwrap();
    let created = Instant::now();
    outwait(created, 200).await;
    // Unused for longer than the idle limit: ended, and stays ended.
    assert_eq!(
        archive.session_user("s-idle", 200, LONG).await.unwrap(),
        None
    );
    assert_eq!(
        archive.session_user("s-idle", LONG, LONG).await.unwrap(),
        None
    );
    // Made longer ago than the absolute limit: ended, however recently used.
    assert_eq!(
        archive.session_user("s-old", LONG, 200).await.unwrap(),
        None
    );
    assert_eq!(
        archive.session_user("s-old", LONG, LONG).await.unwrap(),
        None
    );
    assert!(archive
        .session_user("s-zoe", LONG, LONG)
        .await
        .unwrap()
        .is_some());
    // A password's session has no ID token to give back when it ends.
    assert_eq!(archive.end_session("s-zoe").await.unwrap(), None);
    assert_eq!(
        archive.session_user("s-zoe", LONG, LONG).await.unwrap(),
        None
    );
    // An OpenID sign-in's session keeps its ID token (for signing out at the provider) and
    // gives it back once, when it ends.
    archive
        .create_session("s-oidc", "zoe", Some("eyJhbGciOiJSUzI1NiJ9.e30.sig"))
        .await
        .unwrap();
    assert!(archive
        .session_user("s-oidc", LONG, LONG)
        .await
        .unwrap()
        .is_some());
    assert_eq!(
        archive.end_session("s-oidc").await.unwrap().as_deref(),
        Some("eyJhbGciOiJSUzI1NiJ9.e30.sig")
    );
    assert_eq!(archive.end_session("s-oidc").await.unwrap(), None);
    assert_eq!(
        archive.session_user("s-oidc", LONG, LONG).await.unwrap(),
        None
    );
    // A new password ends the sessions of the old one.
    archive.create_session("s-pw", "zoe", None).await.unwrap();
    assert!(archive.set_password("zoe", "hash-2", &admin).await.unwrap());
    assert!(!archive
        .set_password("nobody", "hash", &admin)
        .await
        .unwrap());
    assert_eq!(
        archive.session_user("s-pw", LONG, LONG).await.unwrap(),
        None
    );
    assert_eq!(
        archive
            .user("zoe")
            .await
            .unwrap()
            .unwrap()
            .password_hash
            .as_deref(),
        Some("hash-2")
    );

    // Tokens: made, found by hash until revoked (expired ones too: the caller judges).
    let in_a_day = now() + time::Duration::days(1);
    let bobs = archive
        .create_token(
            &TokenSpec {
                name: "ci",
                grants: &[],
                token_hash: "t-bob",
                role: Role::Operator,
                owner: Some("bob"),
                expires_at: in_a_day,
            },
            &admin,
        )
        .await
        .unwrap();
    let cli = archive
        .create_token(
            &TokenSpec {
                name: "cron",
                grants: &[],
                token_hash: "t-cli",
                role: Role::Viewer,
                owner: None,
                expires_at: now() - time::Duration::seconds(1),
            },
            &admin,
        )
        .await
        .unwrap();
    let token = archive.token("t-bob").await.unwrap().unwrap();
    assert_eq!(token.id, bobs);
    assert_eq!(
        (
            token.name.as_str(),
            token.role,
            token.owner.as_deref(),
            token.created_by.as_str()
        ),
        ("ci", Role::Operator, Some("bob"), "admin")
    );
    assert_eq!((token.expires_at, token.revoked), (Some(in_a_day), false));
    let expired = archive.token("t-cli").await.unwrap().unwrap();
    assert!(expired.expired(OffsetDateTime::now_utc()));
    assert_eq!(archive.token("t-none").await.unwrap(), None);
    assert!(archive.revoke_token(cli, &admin).await.unwrap());
    assert!(!archive.revoke_token(cli, &admin).await.unwrap());
    assert!(!archive.revoke_token(i64::MAX, &admin).await.unwrap());
    assert_eq!(archive.token("t-cli").await.unwrap(), None);

    // Removing a user ends their sessions and revokes their tokens.
    archive.create_session("s-bob", "bob", None).await.unwrap();
    assert!(archive.remove_user("bob", &admin).await.unwrap());
    assert!(!archive.remove_user("bob", &admin).await.unwrap());
    assert_eq!(archive.user("bob").await.unwrap(), None);
    assert_eq!(
        archive.session_user("s-bob", LONG, LONG).await.unwrap(),
        None
    );
    assert_eq!(archive.token("t-bob").await.unwrap(), None);
    let tokens: Vec<(i64, bool)> = archive
        .tokens()
        .await
        .unwrap()
        .into_iter()
        .map(|t| (t.id, t.revoked))
        .collect();
    assert_eq!(tokens, vec![(bobs, true), (cli, true)]);

    // Every change audited, newest first; reads and refusals are not.
    let actions: Vec<String> = audit_trail(archive)
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(
        actions,
        [
            "user_remove",
            "token_revoke",
            "token_create",
            "token_create",
            "user_password",
            "user_put",
            "user_put",
            "user_put",
        ]
    );
    let trail = audit_trail(archive).await;
    assert!(trail[0].4.contains("1 API tokens"), "{}", trail[0].4);
    assert!(trail.iter().all(|e| e.1 == "admin"));
}
