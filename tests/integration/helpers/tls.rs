//! A test certificate authority and a certificate for `localhost` it signed, made with the
//! real `openssl`: what a TLS server under test presents, trusted through `SSL_CERT_FILE`.

use std::path::Path;

/// The files, as paths: the CA's certificate (to trust), and the server's certificate and key.
pub struct TestCa {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

impl TestCa {
    /// Makes them in `dir`. (A self-signed leaf is refused by rustls' webpki as
    /// `CaUsedAsEndEntity`, so the leaf is signed by a CA of its own.)
    pub fn localhost(dir: &Path) -> TestCa {
        let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
        let (ca, ca_key, cert, key) = (
            path("ca.pem"),
            path("ca.key"),
            path("cert.pem"),
            path("key.pem"),
        );
        let (csr, extensions) = (path("leaf.csr"), path("leaf.ext"));
        std::fs::write(
            &extensions,
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        let openssl = |args: &[&str]| {
            let made = std::process::Command::new("openssl")
                .args(args)
                .output()
                .expect("openssl runs");
            assert!(made.status.success(), "openssl {args:?}: {made:?}");
        };
        let new_key = ["-newkey", "rsa:2048", "-nodes"];
        let ca_subject = ["-subj", "/CN=lazarus test CA", "-days", "1"];
        let ca_files = ["-keyout", &ca_key, "-out", &ca];
        openssl(&[&["req", "-x509"][..], &new_key, &ca_subject, &ca_files].concat());
        let leaf_files = ["-subj", "/CN=localhost", "-keyout", &key, "-out", &csr];
        openssl(&[&["req"][..], &new_key, &leaf_files].concat());
        let signed_by = [
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "1",
        ];
        let leaf = ["-in", &csr, "-extfile", &extensions, "-out", &cert];
        openssl(&[&["x509", "-req"][..], &signed_by, &leaf].concat());
        TestCa { ca, cert, key }
    }
}
