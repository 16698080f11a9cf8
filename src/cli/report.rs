//! How the binary says what went wrong: an error and its causes on one line.

/// `error: cause: cause …`, each cause once. Our error types name their cause in their own
/// message (`path: cannot write: No such file or directory`) and also return it as their
/// `source()`, so a cause whose text already ends the line so far is not repeated.
pub fn report(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::report;
    use anyhow::Context;

    #[derive(Debug, thiserror::Error)]
    #[error("x.mmdb: cannot write: {source}")]
    struct Named {
        source: std::io::Error,
    }

    #[test]
    fn a_cause_already_in_the_message_is_said_once() {
        let io = std::io::Error::from_raw_os_error(libc::ENOENT);
        let said = io.to_string();
        let error = anyhow::Error::new(Named { source: io }).context("geoip build");
        let line = report(&error);
        assert_eq!(line, format!("geoip build: x.mmdb: cannot write: {said}"));
        assert_eq!(line.matches(&said).count(), 1, "{line}");
    }

    #[test]
    fn a_cause_not_in_the_message_is_added() {
        let error: anyhow::Error = Err::<(), _>(std::io::Error::other("disk full"))
            .context("cannot save")
            .map_or_else(|e| e, |_| anyhow::anyhow!("no error"));
        assert_eq!(report(&error), "cannot save: disk full");
    }
}
