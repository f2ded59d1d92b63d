//! Certificates and private keys read from PEM files, with errors that
//! name the file. A private key is read like a secret: a key file that its
//! group or others may read is refused.

use std::path::{Path, PathBuf};

use gpumon_runtime::secrets::{read_private, SecretError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use thiserror::Error;

/// A certificate chain and its private key, as PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1), owner-only.
    pub key_file: PathBuf,
}

/// Why a TLS setup cannot be used.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A certificate file cannot be read.
    #[error("cannot read certificate file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The private key file cannot be read or is open to others.
    #[error("TLS private key: {0}")]
    Key(#[from] SecretError),
    /// A file holds no usable PEM of the kind wanted.
    #[error("{path}: {reason}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// rustls refused the combination (e.g. a key that does not match the
    /// certificate).
    #[error("{context}: {source}")]
    Rustls {
        /// What was being set up.
        context: String,
        /// rustls' reason.
        source: rustls::Error,
    },
}

/// Every certificate in a PEM file; at least one.
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_owned(),
            reason: format!("not a PEM certificate file ({e})"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            path: path.to_owned(),
            reason: "holds no certificate (a PEM 'BEGIN CERTIFICATE' block)".into(),
        });
    }
    Ok(certs)
}

/// The private key in an owner-only PEM file.
pub fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let text = read_private(path)?;
    PrivateKeyDer::from_pem_slice(text.as_bytes()).map_err(|e| TlsError::Pem {
        path: path.to_owned(),
        reason: format!("holds no usable private key ({e})"),
    })
}

impl Identity {
    /// The chain and the key, read.
    pub fn read(&self) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
        Ok((read_certs(&self.cert_file)?, read_key(&self.key_file)?))
    }
}

/// A root store of every certificate in `path`.
pub fn read_roots(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs(path)? {
        roots.add(cert).map_err(|source| TlsError::Rustls {
            context: format!("CA file {}", path.display()),
            source,
        })?;
    }
    Ok(roots)
}
