//! Errors of the geo module, worded for an operator: each names the file, line or config field.

use std::path::PathBuf;

/// Everything that can go wrong while loading, compiling or building geo data.
#[derive(Debug, thiserror::Error)]
pub enum GeoError {
    /// A `[geo]` config value is wrong; `field` is its dotted path, e.g. `geo.countries.GB`.
    #[error("{field}: {message}")]
    Config { field: String, message: String },
    /// A file could not be read.
    #[error("{}: cannot read: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The `maxminddb` crate refused the database (bad metadata, broken data section, ...).
    #[error("geo database {}: {source}", .path.display())]
    Database {
        path: PathBuf,
        #[source]
        source: maxminddb::MaxMindDbError,
    },
    /// The database opened but its search tree or records are unusable.
    #[error("geo database {}: {reason}", .path.display())]
    InvalidDatabase { path: PathBuf, reason: String },
    /// A row of a CSV source file is wrong (`line` counts from 1).
    #[error("{}:{line}: {message}", .path.display())]
    Csv {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// Writing the built database failed (names the file and the step that failed).
    #[error(transparent)]
    Write(#[from] crate::files::WriteError),
    /// The MaxMind DB writer failed for a reason not tied to one CSV row.
    #[error("{}: cannot build database: {message}", .path.display())]
    Build { path: PathBuf, message: String },
}
