//! A TLS client's verifier that trusts any server certificate, as Go's
//! `tls.Config{InsecureSkipVerify: true}` does, while still checking that the server signed the
//! handshake with the key of the certificate it presented. kube-apiserver talks to kubelets this
//! way without `--kubelet-certificate-authority`, and `kubeadm join` reads the cluster CA off the
//! API server's handshake this way before it can trust anything (the CA is then checked against
//! the join token's pin). The chain of the last handshake is kept for that second use.

use std::sync::{Arc, Mutex};

use rustls::DigitallySignedStruct;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// Accepts any server certificate; records the chain the server presented.
#[derive(Debug)]
pub struct AnyServerCert {
    provider: Arc<CryptoProvider>,
    presented: Mutex<Vec<CertificateDer<'static>>>,
}

impl AnyServerCert {
    /// A verifier checking handshake signatures with `provider`'s algorithms.
    pub fn new(provider: Arc<CryptoProvider>) -> AnyServerCert {
        AnyServerCert {
            provider,
            presented: Mutex::default(),
        }
    }

    /// The chain (leaf first) the server presented in the last handshake, taken out.
    pub fn take_presented(&self) -> Vec<CertificateDer<'static>> {
        std::mem::take(&mut *self.presented.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl ServerCertVerifier for AnyServerCert {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut presented = self.presented.lock().unwrap_or_else(|p| p.into_inner());
        presented.clear();
        presented.push(end_entity.clone().into_owned());
        presented.extend(intermediates.iter().map(|c| c.clone().into_owned()));
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
