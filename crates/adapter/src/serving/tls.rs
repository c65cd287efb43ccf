//! The serving certificate: the files given (`--tls-cert-file`, `--tls-private-key-file`),
//! or a self-signed one made at start-up as kube-scheduler makes it: a CA named
//! `localhost-ca@<unix time>` and, signed by it, a certificate named `localhost@<unix time>`
//! for `localhost` and 127.0.0.1 (and the bind address when it is not a wildcard), valid from
//! an hour ago for a year. With `--cert-dir` the pair is kept there as
//! `kube-scheduler.crt` (the certificate, then the CA) and `kube-scheduler.key`, and reused
//! by the next start while both files can be read; without, it lives in memory.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The base name of the self-signed pair in `--cert-dir`: kube-scheduler's.
pub const PAIR_NAME: &str = "kube-scheduler";
/// The host the self-signed certificate is made for.
const SELF_SIGNED_HOST: &str = "localhost";
/// How long a self-signed certificate is valid (client-go's one year).
const SELF_SIGNED_VALIDITY: time::Duration = time::Duration::days(365);
/// How far back a self-signed certificate is valid from, against clock skew.
const SELF_SIGNED_BACKDATE: time::Duration = time::Duration::hours(1);
/// The one application protocol served.
const ALPN_HTTP1: &[u8] = b"http/1.1";

/// Where the serving certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateSource {
    /// These files (PEM; the certificate file may hold the chain after the leaf).
    Files {
        /// `--tls-cert-file`.
        cert: PathBuf,
        /// `--tls-private-key-file`.
        key: PathBuf,
    },
    /// A self-signed certificate, kept in `dir` if given.
    SelfSigned {
        /// `--cert-dir`.
        dir: Option<PathBuf>,
    },
}

/// The certificate cannot be read, made or written.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read or holds no usable PEM.
    #[error("{flag} {path}: {reason}")]
    File {
        /// The flag (or directory) the file comes from.
        flag: &'static str,
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// The self-signed pair cannot be made.
    #[error("cannot make a self-signed certificate: {0}")]
    Generate(String),
    /// The pair does not make a TLS configuration (the key does not match, ...).
    #[error("serving certificate: {0}")]
    Config(String),
}

/// The certificate chain and key PEM texts to serve with, from `source`; `bind` adds its
/// address to a self-signed certificate when it is not a wildcard.
pub fn certificate(source: &CertificateSource, bind: IpAddr) -> Result<(String, String), TlsError> {
    match source {
        CertificateSource::Files { cert, key } => Ok((
            read(cert, "--tls-cert-file")?,
            read(key, "--tls-private-key-file")?,
        )),
        CertificateSource::SelfSigned { dir: None } => {
            let pair = self_signed(bind)?;
            tracing::info!("generated a self-signed serving certificate in memory");
            Ok(pair)
        }
        CertificateSource::SelfSigned { dir: Some(dir) } => {
            let (cert, key) = pair_paths(dir);
            if let (Ok(c), Ok(k)) = (
                std::fs::read_to_string(&cert),
                std::fs::read_to_string(&key),
            ) {
                return Ok((c, k));
            }
            let (c, k) = self_signed(bind)?;
            write(&cert, &c, 0o644)?;
            write(&key, &k, 0o600)?;
            tracing::info!(cert = %cert.display(), key = %key.display(), "generated a self-signed serving certificate");
            Ok((c, k))
        }
    }
}

/// The certificate and key files of the self-signed pair in `dir`.
pub fn pair_paths(dir: &Path) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{PAIR_NAME}.crt")),
        dir.join(format!("{PAIR_NAME}.key")),
    )
}

fn read(path: &Path, flag: &'static str) -> Result<String, TlsError> {
    std::fs::read_to_string(path).map_err(|e| TlsError::File {
        flag,
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

fn write(path: &Path, text: &str, mode: u32) -> Result<(), TlsError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let error = |e: std::io::Error| TlsError::File {
        flag: "--cert-dir",
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(error)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(error)?;
    file.write_all(text.as_bytes()).map_err(error)
}

/// A CA and a serving certificate signed by it, as kube-scheduler makes them (the key is
/// ECDSA P-256 where client-go uses RSA 2048): (chain PEM, key PEM).
fn self_signed(bind: IpAddr) -> Result<(String, String), TlsError> {
    let generate = |e: rcgen::Error| TlsError::Generate(e.to_string());
    let now = time::OffsetDateTime::now_utc();
    let unix = now.unix_timestamp();
    let from = now - SELF_SIGNED_BACKDATE;
    let until = from + SELF_SIGNED_VALIDITY;

    let ca_key = KeyPair::generate().map_err(generate)?;
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(generate)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, format!("{SELF_SIGNED_HOST}-ca@{unix}"));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
    ];
    ca.not_before = from;
    ca.not_after = until;
    let ca_cert = ca.self_signed(&ca_key).map_err(generate)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut names = vec![
        SELF_SIGNED_HOST.to_string(),
        IpAddr::V4(Ipv4Addr::LOCALHOST).to_string(),
    ];
    if !bind.is_unspecified() && !bind.is_loopback() {
        names.push(bind.to_string());
    }
    let key = KeyPair::generate().map_err(generate)?;
    let mut leaf = CertificateParams::new(names).map_err(generate)?;
    leaf.distinguished_name
        .push(DnType::CommonName, format!("{SELF_SIGNED_HOST}@{unix}"));
    leaf.key_usages = vec![
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::DigitalSignature,
    ];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = from;
    leaf.not_after = until;
    let cert = leaf.signed_by(&key, &issuer).map_err(generate)?;
    Ok((
        format!("{}{}", cert.pem(), ca_cert.pem()),
        key.serialize_pem(),
    ))
}

/// A rustls server configuration serving the chain and key (PEM), HTTP/1.1 only.
pub fn server_config(chain: &str, key: &str) -> Result<Arc<ServerConfig>, TlsError> {
    let config = |e: &dyn std::fmt::Display| TlsError::Config(e.to_string());
    let chain = CertificateDer::pem_slice_iter(chain.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| config(&e))?;
    if chain.is_empty() {
        return Err(TlsError::Config(
            "no PEM certificate in the certificate file".to_string(),
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(|e| config(&e))?;
    let mut server =
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| config(&e))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| config(&e))?;
    server.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(server))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_self_signed_pair_serves_and_names_localhost() {
        let (chain, key) = self_signed(IpAddr::V4(Ipv4Addr::UNSPECIFIED)).unwrap();
        assert_eq!(
            chain.matches("BEGIN CERTIFICATE").count(),
            2,
            "leaf then CA"
        );
        server_config(&chain, &key).unwrap();
        let leaf = CertificateDer::pem_slice_iter(chain.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(&leaf).unwrap();
        let cn = parsed.subject().to_string();
        assert!(cn.starts_with("CN=localhost@"), "{cn}");
        let sans = parsed.subject_alternative_name().unwrap().unwrap();
        let shown = format!("{:?}", sans.value.general_names);
        assert!(
            shown.contains("DNSName(\"localhost\")") && shown.contains("IPAddress([127, 0, 0, 1])"),
            "{shown}"
        );
        let validity = parsed.validity();
        let days = (validity.not_after.timestamp() - validity.not_before.timestamp()) / 86_400;
        assert_eq!(days, 365);
    }

    #[test]
    fn a_cert_dir_keeps_the_pair_for_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let source = CertificateSource::SelfSigned {
            dir: Some(dir.path().join("certs")),
        };
        let bind = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let first = certificate(&source, bind).unwrap();
        let (cert, key) = pair_paths(&dir.path().join("certs"));
        assert!(cert.ends_with("kube-scheduler.crt") && key.ends_with("kube-scheduler.key"));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(certificate(&source, bind).unwrap(), first);
    }

    #[test]
    fn a_missing_file_names_its_flag() {
        let source = CertificateSource::Files {
            cert: "/nonexistent/tls.crt".into(),
            key: "/nonexistent/tls.key".into(),
        };
        let e = certificate(&source, IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--tls-cert-file /nonexistent/tls.crt"),
            "{e}"
        );
    }
}
