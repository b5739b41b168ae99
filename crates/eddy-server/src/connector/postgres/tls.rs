//! TLS to PostgreSQL, with Feldera's settings: `ssl_ca_pem` (or
//! `ssl_ca_location`), the certificates the server's must chain to, turns
//! TLS on; `ssl_client_pem` and `ssl_client_key` (or their `_location`s,
//! with `ssl_certificate_chain_location`'s intermediates) present a client
//! certificate; `verify_hostname: false` accepts a server certificate for
//! another name (still checked against the CA). Through rustls (with aws-lc-rs,
//! as the workspace has it) and `tokio-postgres-rustls`.
//!
//! With TLS on, a connection that would not use it fails (an `sslmode`
//! of `prefer`, the default, becomes `require`), so a server that
//! declines TLS is an error rather than a plain-text connection. Files
//! named by `_location` are read under the file connectors' rules.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::connector::FileAccess;

/// A connector's TLS settings, as given.
#[derive(Debug, Clone, Default)]
pub struct TlsSettings {
    pub ca_pem: Option<String>,
    pub ca_location: Option<String>,
    pub client_pem: Option<String>,
    pub client_location: Option<String>,
    pub client_key: Option<String>,
    pub client_key_location: Option<String>,
    pub chain_location: Option<String>,
    pub verify_hostname: Option<bool>,
}

impl TlsSettings {
    /// Checks what needs no file read: a client certificate comes with
    /// its key, and everything TLS needs the CA; paths by their text.
    pub fn check(&self, files: &FileAccess) -> Result<(), String> {
        let ca = self.ca_pem.is_some() || self.ca_location.is_some();
        let cert = self.client_pem.is_some() || self.client_location.is_some();
        let key = self.client_key.is_some() || self.client_key_location.is_some();
        if cert != key {
            return Err(
                "a client certificate ('ssl_client_pem' or 'ssl_client_location') and its key ('ssl_client_key' or 'ssl_client_key_location') go together"
                    .into(),
            );
        }
        // (`verify_hostname` without a CA is Feldera's default on a
        // plain-text connection: nothing to verify.)
        if (cert || self.chain_location.is_some()) && !ca {
            return Err(
                "TLS needs the CA certificates ('ssl_ca_pem' or 'ssl_ca_location'): without them the connection is plain text"
                    .into(),
            );
        }
        for path in [
            &self.ca_location,
            &self.client_location,
            &self.client_key_location,
            &self.chain_location,
        ]
        .into_iter()
        .flatten()
        {
            files.check(path)?;
        }
        Ok(())
    }

    /// The connector's TLS, reading the files named; `None` without a CA
    /// (plain text).
    pub fn connector(&self, files: &FileAccess) -> Result<Option<MakeRustlsConnect>, String> {
        self.check(files)?;
        let read =
            |pem: &Option<String>, location: &Option<String>, what: &str| match (pem, location) {
                (Some(p), _) => Ok(Some(p.clone().into_bytes())),
                (None, Some(path)) => {
                    let path = files.resolve(path)?;
                    std::fs::read(&path)
                        .map(Some)
                        .map_err(|e| format!("{what} '{}': {e}", path.display()))
                }
                (None, None) => Ok(None),
            };
        let Some(ca) = read(&self.ca_pem, &self.ca_location, "'ssl_ca_location'")? else {
            return Ok(None);
        };
        let mut roots = RootCertStore::empty();
        for cert in certificates(&ca, "the CA certificates")? {
            roots
                .add(cert)
                .map_err(|e| format!("the CA certificates: {e}"))?;
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let verifier =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                .build()
                .map_err(|e| format!("the CA certificates: {e}"))?;
        let verifier: Arc<dyn ServerCertVerifier> = if self.verify_hostname == Some(false) {
            Arc::new(AnyName(verifier))
        } else {
            verifier
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let client = read(
            &self.client_pem,
            &self.client_location,
            "'ssl_client_location'",
        )?;
        let config = match client {
            None => builder.with_no_client_auth(),
            Some(pem) => {
                let mut chain = certificates(&pem, "the client certificate")?;
                let more = read(
                    &None,
                    &self.chain_location,
                    "'ssl_certificate_chain_location'",
                )?;
                if let Some(more) = more {
                    chain.extend(certificates(&more, "the certificate chain")?);
                }
                let key = read(
                    &self.client_key,
                    &self.client_key_location,
                    "'ssl_client_key_location'",
                )?
                .ok_or("the client certificate's key is missing")?;
                let key = PrivateKeyDer::from_pem_slice(&key)
                    .map_err(|e| format!("the client certificate's key: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("the client certificate: {e}"))?
            }
        };
        Ok(Some(MakeRustlsConnect::new(config)))
    }
}

/// The certificates of a PEM text; at least one.
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{what}: no PEM certificate found"));
    }
    Ok(certs)
}

/// A server certificate checked against the CA, whatever name it is for
/// (`verify_hostname: false`).
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
