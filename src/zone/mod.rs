//! zone
//! Zone files: `parse` loads RFC 1035 master files with file:line for every record,
//! `validate` checks a parsed zone for errors and warnings.
pub mod parse;
pub mod validate;
