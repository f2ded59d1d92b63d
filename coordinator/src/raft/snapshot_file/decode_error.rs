//! Why a snapshot's data is refused: its sealed id names another format or
//! another checksum ([`SealError`]), or the data does not decode in the
//! format it claims ([`DecodeError`]). A replica refuses such a snapshot
//! before anything of it is written.

use thiserror::Error;

/// A sealed snapshot id that does not match its data.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SealError {
    /// The id names another format than the data is read in.
    #[error(
        "snapshot {id} is in format {version}; this build reads format {expected} here (upgrade every replica to one build)"
    )]
    OtherFormat {
        /// The snapshot's id.
        id: String,
        /// The format it names.
        version: u32,
        /// The format read here.
        expected: u32,
    },
    /// The data's checksum is not the one the id names.
    #[error("snapshot {id} is damaged: its data has checksum {got}, its id says {sum}")]
    Damaged {
        /// The snapshot's id.
        id: String,
        /// The data's checksum.
        got: String,
        /// The checksum the id names.
        sum: String,
    },
}

/// A snapshot file's data that cannot be loaded.
#[derive(Debug, Error)]
pub enum DecodeError {
    /// Its seal does not match.
    #[error(transparent)]
    Seal(#[from] SealError),
    /// The data does not decode in its format.
    #[error("format {version} data does not decode: {source}")]
    Data {
        /// The format.
        version: u32,
        /// postcard's reason.
        source: postcard::Error,
    },
}
