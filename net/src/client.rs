//! The HTTP client every gpumon process uses: reqwest on a rustls config
//! built here.
//!
//! Trust: with a CA file, exactly the certificates in it (a cluster's
//! private CA); without one, Mozilla's root set compiled in from
//! `webpki-roots`, so a process verifies servers the same way whatever its
//! host has (or lacks, as slim containers do) in its CA store. With an
//! [`Identity`], the client presents it to servers that ask (mutual TLS).

use std::path::PathBuf;

use crate::files::{read_roots, Identity, TlsError};

/// How a client verifies servers and, optionally, proves who it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// Trust only the CA certificates in this PEM file [default: the
    /// compiled-in public roots].
    pub ca_file: Option<PathBuf>,
    /// The certificate and key shown to servers that require one.
    pub identity: Option<Identity>,
}

impl ClientTls {
    /// The rustls config: roots, then the client certificate if any.
    pub fn config(&self) -> Result<rustls::ClientConfig, TlsError> {
        let roots = match &self.ca_file {
            Some(path) => read_roots(path)?,
            None => rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            },
        };
        let builder = rustls::ClientConfig::builder_with_provider(crate::provider())
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsError::Rustls {
                context: "TLS client".into(),
                source,
            })?
            .with_root_certificates(roots);
        match &self.identity {
            None => Ok(builder.with_no_client_auth()),
            Some(identity) => {
                let (chain, key) = identity.read()?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|source| TlsError::Rustls {
                        context: format!(
                            "client certificate {} with key {}",
                            identity.cert_file.display(),
                            identity.key_file.display()
                        ),
                        source,
                    })
            }
        }
    }
}

/// A reqwest builder that speaks http:// and, per `tls`, https://.
pub fn client_builder(tls: &ClientTls) -> Result<reqwest::ClientBuilder, TlsError> {
    Ok(client_builder_with(tls.config()?))
}

/// A reqwest builder on a TLS client config already built (and checked)
/// by [`ClientTls::config`]; it cannot fail.
pub fn client_builder_with(config: rustls::ClientConfig) -> reqwest::ClientBuilder {
    reqwest::Client::builder().tls_backend_preconfigured(config)
}

/// A reqwest builder with the default trust and no client certificate;
/// it reads no file, so it cannot fail.
pub fn plain_client_builder() -> reqwest::ClientBuilder {
    client_builder(&ClientTls::default()).expect("the default TLS client config reads no file")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_ca_file_is_named_in_the_error() {
        let tls = ClientTls {
            ca_file: Some("/nonexistent/ca.pem".into()),
            identity: None,
        };
        let err = client_builder(&tls).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
    }

    #[test]
    fn the_default_client_builds() {
        plain_client_builder().build().expect("builds");
    }
}
