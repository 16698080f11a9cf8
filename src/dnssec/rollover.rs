//! Automatic key rollover (placeholder until the rollover lands).
