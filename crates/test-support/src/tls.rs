//! Certificates for test servers that gantry talks to over TLS (also included on its own by
//! tests that need no control plane; each uses part of it).
#![allow(dead_code)]

/// A CA and a serving certificate for 127.0.0.1 signed by it.
pub struct TestPki {
    /// The CA's certificate, PEM.
    pub ca_pem: String,
    /// The CA's certificate, DER.
    pub ca_der: Vec<u8>,
    /// The serving certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PEM.
    pub key_pem: String,
}

/// A new CA and a serving certificate for 127.0.0.1 it signed.
pub fn test_pki() -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().expect("serving key");
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("serving params")
        .signed_by(&key, &issuer)
        .expect("serving certificate");
    TestPki {
        ca_pem: ca_cert.pem(),
        ca_der: ca_cert.der().to_vec(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}
