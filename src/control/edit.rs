//! Comment-preserving edits of control-file text, for the CLI (`steerdns weight set` and
//! friends), and the lock and compare-before-replace that keep two operators' edits apart.
//!
//! Owns only text-to-text edits and when an edit may replace the file; the replacement itself
//! (temporary file and rename) is [`crate::files::replace_file`]'s. It does not check that the
//! edited knobs make sense against the config (that is the snapshot's job when the server loads
//! the file) and it never touches the running server.
//!
//! Every edit parses the text with `toml_edit`, changes the one key it was asked to change
//! (creating tables and keys as needed) and keeps everything else, comments and layout included,
//! byte for byte.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, InlineTable, Item, Table, Value};

use crate::files::{parent_dir, replace_file, resolve_symlink, WriteError};
pub use crate::policy::MAX_WEIGHT;

/// Why an edit or a write failed.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// The text is not valid TOML.
    #[error("line {line}, column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    /// A key on the way to the knob holds something other than a table.
    #[error("`{path}` is {found}, not a table, so it cannot hold the setting")]
    NotATable { path: String, found: &'static str },
    /// The knob's own key holds a table (e.g. a `[profiles.P.endpoints.E.weight]` section).
    #[error("`{path}` is a table, not a value; fix it by hand")]
    NotAValue { path: String },
    /// A profile, endpoint or region name the config would never accept.
    #[error("{name:?} is not a valid {what} name (1 to 63 letters, digits, '-' or '_')")]
    BadName { what: &'static str, name: String },
    /// A weight above [`MAX_WEIGHT`].
    #[error("weight {weight} for endpoint {endpoint:?} is above the maximum of {MAX_WEIGHT}")]
    WeightTooLarge { endpoint: String, weight: u32 },
    /// The same endpoint twice in one change.
    #[error("endpoint {endpoint:?} is given more than once")]
    DuplicateEndpoint { endpoint: String },
    /// A serial TOML cannot hold (integers are signed 64-bit).
    #[error("serial {0} is above the largest TOML integer ({max})", max = i64::MAX)]
    SerialTooLarge(u64),
    /// A top-level `serial` that is not a non-negative integer.
    #[error("the top-level `serial` is {0}, not a whole number")]
    SerialNotANumber(String),
    /// A command-line `ENDPOINT=WEIGHT` argument that does not parse.
    #[error("{arg:?}: {problem} (expected ENDPOINT=WEIGHT, e.g. frontdoor=0)")]
    BadAssignment { arg: String, problem: String },
    /// Writing the file failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Another edit held the lock for longer than we wait.
    #[error(
        "{path}: another edit of the control file holds the lock (waited {waited_ms} ms); \
         nothing written, try again"
    )]
    Locked { path: PathBuf, waited_ms: u64 },
    /// Taking the lock failed.
    #[error("{path}: cannot lock: {source}")]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file changed between reading it and replacing it (a writer that does not lock,
    /// e.g. an editor or config management).
    #[error("{path}: changed by someone else while this edit was being made")]
    ChangedUnderneath { path: PathBuf },
    /// The text in force does not parse as a control file, so an edit that reads its knobs
    /// (a drill's shift) cannot be made.
    #[error(transparent)]
    Control(#[from] super::ControlError),
    /// A shift of weight from an endpoint that has none.
    #[error("{profile}/{endpoint} has no weight to move")]
    NoWeightToMove { profile: String, endpoint: String },
    /// A drain of a region that is drained already.
    #[error("{region} is drained already")]
    DrainedAlready { region: String },
    /// A forced answer for a region that has one already.
    #[error("{region} has a forced answer already")]
    ForcedAlready { region: String },
}

/// An exclusive lock serializing edits of one control file, held until dropped: `flock(2)` on
/// `<file>.lock` beside it (never on the file itself, which each edit replaces by a rename).
/// Every CLI edit takes it across read, edit, validate and write, so two operators' commands
/// run one after the other and neither loses the other's change.
pub struct ControlLock {
    _file: File,
}

impl ControlLock {
    /// Where the lock of `control` lives.
    pub fn path_for(control: &Path) -> PathBuf {
        let mut name = control.file_name().unwrap_or_default().to_os_string();
        name.push(".lock");
        parent_dir(control).join(name)
    }

    /// Opens the lock file for `flock` (which needs no write access, so any operator who can
    /// read it can lock it), creating it group-writable (0660, whatever the umask) so that
    /// every operator of the group that may edit the control file can use it afterwards.
    fn open(path: &Path) -> io::Result<File> {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        match File::open(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            opened => return opened,
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o660)
            .open(path)?;
        // The umask may have taken the group's write bit; give it back (best effort: if
        // another operator created it a moment ago, it is theirs to set, and they did).
        let _ = file.set_permissions(fs::Permissions::from_mode(0o660));
        Ok(file)
    }

    /// Waits (polling, at most `wait`) for the lock of `control`.
    pub fn acquire(control: &Path, wait: std::time::Duration) -> Result<ControlLock, EditError> {
        use std::os::fd::AsRawFd;
        let path = Self::path_for(&resolve_symlink(control)?);
        let lock_error = |source| EditError::Lock {
            path: path.clone(),
            source,
        };
        let file = Self::open(&path).map_err(lock_error)?;
        let started = std::time::Instant::now();
        loop {
            // SAFETY: flock(2) on a descriptor this function owns; no memory is passed.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc == 0 {
                return Ok(ControlLock { _file: file });
            }
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(lock_error(error));
            }
            if started.elapsed() >= wait {
                return Err(EditError::Locked {
                    path,
                    waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// Replaces `path` with `text` if its content is still `expected` (what the edit started
/// from; `None`: the file did not exist). Call with the [`ControlLock`] held: the lock keeps
/// out other CLI edits, this check catches writers that do not take it.
pub fn replace_if_unchanged(
    path: &Path,
    expected: Option<&str>,
    text: &str,
) -> Result<(), EditError> {
    let now = match fs::read(path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(EditError::Write(WriteError {
                path: path.to_path_buf(),
                action: "read it again before replacing it",
                source,
            }))
        }
    };
    if now.as_deref() != expected.map(str::as_bytes) {
        return Err(EditError::ChangedUnderneath {
            path: path.to_path_buf(),
        });
    }
    replace_file(path, text.as_bytes())?;
    Ok(())
}

/// One operator's edit of the control text, as a value: what `weight set`, `drain`/`undrain`
/// and `gate set`/`clear` ask for, so that the same edit can travel to the running server
/// (`POST /v1/control/edit`), through etcd or to the local file and be applied there to the
/// text it replaces, under that writer's lock or compare-and-swap.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Edit {
    /// `weight set PROFILE ENDPOINT=WEIGHT…`.
    SetWeights {
        profile: String,
        weights: Vec<(String, u32)>,
    },
    /// `drain REGION` (`on`) and `undrain REGION`.
    Drain { region: String, on: bool },
    /// `cell drain LAYER CELL` (`on`) and `cell undrain LAYER CELL`.
    DrainCell {
        layer: String,
        cell: String,
        on: bool,
    },
    /// `gate set NAME VALUE` (`Some`) and `gate clear NAME` (`None`).
    Gate { name: String, value: Option<String> },
}

impl Edit {
    /// The edit applied to `text`, everything else kept byte for byte.
    pub fn apply(&self, text: &str) -> Result<String, EditError> {
        match self {
            Edit::SetWeights { profile, weights } => set_weights(text, profile, weights),
            Edit::Drain { region, on } => set_drain(text, region, *on),
            Edit::DrainCell { layer, cell, on } => set_cell_drain(text, layer, cell, *on),
            Edit::Gate { name, value } => set_gate(text, name, value.as_deref()),
        }
    }

    /// What the edit is, as the commands and their refusals word it.
    pub fn describe(&self) -> String {
        match self {
            Edit::SetWeights { profile, .. } => format!("weight set {profile}"),
            Edit::Drain { region, on } => {
                format!("{} {region}", if *on { "drain" } else { "undrain" })
            }
            Edit::DrainCell { layer, cell, on } => {
                let verb = if *on { "drain" } else { "undrain" };
                format!("cell {verb} {layer} {cell}")
            }
            Edit::Gate {
                name,
                value: Some(v),
            } => format!("gate {name} = {v:?}"),
            Edit::Gate { name, value: None } => format!("gate {name} cleared"),
        }
    }
}

/// Sets `profiles.<profile>.endpoints.<endpoint>.weight` for each `(endpoint, weight)` pair.
///
/// Works whether an endpoint is written inline (`E = { weight = 1 }`), as its own
/// `[profiles.P.endpoints.E]` section or with dotted keys. Missing tables are created: a missing
/// profile becomes a `[profiles.P.endpoints]` section, a missing endpoint an inline table
/// `E = { weight = W }`. An empty `changes` returns the text unchanged.
pub fn set_weights(
    text: &str,
    profile: &str,
    changes: &[(String, u32)],
) -> Result<String, EditError> {
    check_name("profile", profile)?;
    for (i, (endpoint, weight)) in changes.iter().enumerate() {
        check_name("endpoint", endpoint)?;
        if *weight > MAX_WEIGHT {
            return Err(EditError::WeightTooLarge {
                endpoint: endpoint.clone(),
                weight: *weight,
            });
        }
        if changes[..i].iter().any(|(earlier, _)| earlier == endpoint) {
            return Err(EditError::DuplicateEndpoint {
                endpoint: endpoint.clone(),
            });
        }
    }
    let mut doc = parse(text)?;
    for (endpoint, weight) in changes {
        let table = endpoint_table(&mut doc, profile, endpoint)?;
        let path = format!("profiles.{profile}.endpoints.{endpoint}");
        set_value(table, "weight", Value::from(i64::from(*weight)), &path)?;
    }
    Ok(doc.to_string())
}

/// Sets `profiles.<profile>.endpoints.<endpoint>.enabled`, creating tables as needed.
pub fn set_enabled(
    text: &str,
    profile: &str,
    endpoint: &str,
    enabled: bool,
) -> Result<String, EditError> {
    check_name("profile", profile)?;
    check_name("endpoint", endpoint)?;
    let mut doc = parse(text)?;
    let table = endpoint_table(&mut doc, profile, endpoint)?;
    let path = format!("profiles.{profile}.endpoints.{endpoint}");
    set_value(table, "enabled", Value::from(enabled), &path)?;
    Ok(doc.to_string())
}

/// Sets `regions.<region>.drain`; a missing region becomes a `[regions.R]` section.
pub fn set_drain(text: &str, region: &str, drain: bool) -> Result<String, EditError> {
    check_name("region", region)?;
    let mut doc = parse(text)?;
    let regions = child(doc.as_item_mut(), "regions", "", Create::Section)?;
    let table = child(regions, region, "regions", Create::Section)?;
    set_value(
        table,
        "drain",
        Value::from(drain),
        &format!("regions.{region}"),
    )?;
    Ok(doc.to_string())
}

/// Sets `cells.<layer>.<cell>.drain`; missing tables become a `[cells.LAYER.CELL]` section.
pub fn set_cell_drain(
    text: &str,
    layer: &str,
    cell: &str,
    drain: bool,
) -> Result<String, EditError> {
    check_name("cell layer", layer)?;
    check_name("cell", cell)?;
    let mut doc = parse(text)?;
    let cells = child(doc.as_item_mut(), "cells", "", Create::Section)?;
    let layer_table = child(cells, layer, "cells", Create::Section)?;
    let path = format!("cells.{layer}");
    let table = child(layer_table, cell, &path, Create::Section)?;
    set_value(
        table,
        "drain",
        Value::from(drain),
        &format!("cells.{layer}.{cell}"),
    )?;
    Ok(doc.to_string())
}

/// Sets `regions.<region>.force` (`"global"`, `"regional"`, `"fallback:SITE"`), or removes it
/// with `None`.
pub fn set_force(text: &str, region: &str, force: Option<&str>) -> Result<String, EditError> {
    check_name("region", region)?;
    let mut doc = parse(text)?;
    let regions = child(doc.as_item_mut(), "regions", "", Create::Section)?;
    let table = child(regions, region, "regions", Create::Section)?;
    match force {
        Some(force) => set_value(
            table,
            "force",
            Value::from(force),
            &format!("regions.{region}"),
        )?,
        None => {
            if let Some(t) = table.as_table_like_mut() {
                t.remove("force");
            }
        }
    }
    Ok(doc.to_string())
}

/// Sets `gates.<gate>` (a value the safety rules' gates look at, e.g. `"armed"`), or removes
/// it with `None`.
pub fn set_gate(text: &str, gate: &str, value: Option<&str>) -> Result<String, EditError> {
    check_name("gate", gate)?;
    let mut doc = parse(text)?;
    match value {
        Some(value) => {
            let gates = child(doc.as_item_mut(), "gates", "", Create::Section)?;
            set_value(gates, gate, Value::from(value), "gates")?;
        }
        None => {
            if let Some(gates) = doc.get_mut("gates").and_then(Item::as_table_like_mut) {
                gates.remove(gate);
            }
        }
    }
    Ok(doc.to_string())
}

/// Replaces the text's `[[overrides]]` (the safety-rule overrides of the version it was last
/// written as) with `overrides`, the ones this change needs: an override covers one change,
/// never the next.
pub fn set_overrides(
    text: &str,
    overrides: &[crate::control::Override],
) -> Result<String, EditError> {
    let mut doc = parse(text)?;
    doc.remove("overrides");
    if !overrides.is_empty() {
        let mut tables = toml_edit::ArrayOfTables::new();
        for o in overrides {
            let mut table = Table::new();
            table.insert("rule", toml_edit::value(o.rule.as_str()));
            table.insert("reason", toml_edit::value(o.reason.as_str()));
            table.insert("by", toml_edit::value(o.by.as_str()));
            table.insert("at", toml_edit::value(o.at.as_str()));
            tables.push(table);
        }
        doc.insert("overrides", Item::ArrayOfTables(tables));
    }
    Ok(doc.to_string())
}

/// Sets the top-level `serial`, adding it (above the first section) when the text has none.
///
/// It always sets: whether a change should carry an explicit serial is the caller's decision.
/// The usual rule is "bump it only if the file already has one", which
/// [`bump_serial_if_present`] implements.
pub fn set_serial(text: &str, serial: u64) -> Result<String, EditError> {
    let mut doc = parse(text)?;
    // TOML integers are signed 64-bit; a larger serial cannot be written.
    let value = i64::try_from(serial).map_err(|_| EditError::SerialTooLarge(serial))?;
    set_value(doc.as_item_mut(), "serial", Value::from(value), "")?;
    Ok(doc.to_string())
}

/// If the text has an integer `serial`, replaces it with serial + 1 and returns the new text
/// and serial; otherwise returns the text unchanged and `None` (steerdns numbers it).
pub fn bump_serial_if_present(text: &str) -> Result<(String, Option<u64>), EditError> {
    bump_serial_above(text, 0)
}

/// The text's integer top-level `serial`, if it has one.
pub fn explicit_serial(text: &str) -> Result<Option<u64>, EditError> {
    let doc = parse(text)?;
    let Some(item) = doc.get("serial") else {
        return Ok(None);
    };
    item.as_integer()
        .and_then(|n| u64::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| EditError::SerialNotANumber(item.to_string().trim().to_owned()))
}

/// If the text has an integer `serial`, sets it to one above both it and `floor` (the newest
/// serial recorded or served), so that every edit is a newer version; returns the new text and
/// serial. Without a `serial` the text is returned unchanged with `None` (steerdns numbers it).
pub fn bump_serial_above(text: &str, floor: u64) -> Result<(String, Option<u64>), EditError> {
    let Some(current) = explicit_serial(text)? else {
        return Ok((text.to_owned(), None));
    };
    let next = super::store::next_serial_above([current, floor]);
    Ok((set_serial(text, next)?, Some(next)))
}

/// Parses a command-line `ENDPOINT=WEIGHT` argument, e.g. `frontdoor=0`.
pub fn parse_assignment(arg: &str) -> Result<(String, u32), EditError> {
    let bad = |problem: &str| EditError::BadAssignment {
        arg: arg.to_owned(),
        problem: problem.to_owned(),
    };
    let Some((name, weight)) = arg.split_once('=') else {
        return Err(bad("no '='"));
    };
    let (name, weight) = (name.trim(), weight.trim());
    if name.is_empty() {
        return Err(bad("the endpoint name is missing"));
    }
    check_name("endpoint", name)?;
    if weight.is_empty() {
        return Err(bad("the weight is missing"));
    }
    if !weight.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(&format!(
            "weight {weight:?} is not a whole number from 0 to {MAX_WEIGHT}"
        )));
    }
    match weight.parse::<u32>() {
        Ok(w) if w <= MAX_WEIGHT => Ok((name.to_owned(), w)),
        _ => Err(bad(&format!(
            "weight {weight} is above the maximum of {MAX_WEIGHT}"
        ))),
    }
}

fn parse(text: &str) -> Result<DocumentMut, EditError> {
    text.parse::<DocumentMut>().map_err(|e| {
        let (line, column) = e
            .span()
            .map(|span| crate::text_position::line_column(text, span.start))
            .unwrap_or((0, 0));
        EditError::Syntax {
            line,
            column,
            message: e.message().trim().to_owned(),
        }
    })
}

/// Same rule as the config's names, so a typo is caught before it reaches the file.
fn check_name(what: &'static str, name: &str) -> Result<(), EditError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(EditError::BadName {
            what,
            name: name.to_owned(),
        })
    }
}

/// The table holding one endpoint's knobs, created (inline) if missing.
fn endpoint_table<'a>(
    doc: &'a mut DocumentMut,
    profile: &str,
    endpoint: &str,
) -> Result<&'a mut Item, EditError> {
    let profiles = child(doc.as_item_mut(), "profiles", "", Create::Section)?;
    let profile_item = child(profiles, profile, "profiles", Create::Section)?;
    let endpoints = child(
        profile_item,
        "endpoints",
        &format!("profiles.{profile}"),
        Create::Section,
    )?;
    child(
        endpoints,
        endpoint,
        &format!("profiles.{profile}.endpoints"),
        Create::Inline,
    )
}

/// How to write a table that has to be created.
#[derive(Clone, Copy)]
enum Create {
    /// A `[a.b]` section (its header appears only once it holds values).
    Section,
    /// An inline table `b = { ... }`.
    Inline,
}

/// The table under `key` in the table `parent` (whose dotted path is `parent_path`), created
/// if missing. Children of inline tables are inline and children of dotted-key tables are
/// dotted, so the new text keeps the file's own style and stays valid TOML.
fn child<'a>(
    parent: &'a mut Item,
    key: &str,
    parent_path: &str,
    create: Create,
) -> Result<&'a mut Item, EditError> {
    let child_path = join(parent_path, key);
    let item = match parent {
        Item::Table(table) => {
            if !table.contains_key(key) {
                table.insert(key, new_table(table.is_dotted(), create));
            }
            table.get_mut(key)
        }
        Item::Value(Value::InlineTable(table)) => {
            if !table.contains_key(key) {
                push_inline(table, key, Value::InlineTable(InlineTable::new()));
            }
            toml_edit::TableLike::get_mut(table, key)
        }
        other => {
            return Err(EditError::NotATable {
                path: parent_path.to_owned(),
                found: other.type_name(),
            })
        }
    };
    match item {
        Some(item) if item.is_table_like() => Ok(item),
        Some(other) => Err(EditError::NotATable {
            path: child_path,
            found: other.type_name(),
        }),
        // Just inserted above; kept as an error rather than a panic.
        None => Err(EditError::NotATable {
            path: child_path,
            found: "missing",
        }),
    }
}

fn new_table(parent_dotted: bool, create: Create) -> Item {
    if parent_dotted {
        let mut table = Table::new();
        table.set_dotted(true);
        return Item::Table(table);
    }
    match create {
        Create::Section => {
            let mut table = Table::new();
            table.set_implicit(true);
            Item::Table(table)
        }
        Create::Inline => Item::Value(Value::InlineTable(InlineTable::new())),
    }
}

/// Sets `key` in the table `table` to `value`, keeping the old value's surrounding spaces and
/// trailing comment.
fn set_value(table: &mut Item, key: &str, value: Value, path: &str) -> Result<(), EditError> {
    match table {
        Item::Table(t) => match t.get_mut(key) {
            Some(Item::Value(old)) => replace_keeping_decor(old, value),
            Some(_) => {
                return Err(EditError::NotAValue {
                    path: join(path, key),
                })
            }
            None => {
                t.insert(key, Item::Value(value));
            }
        },
        Item::Value(Value::InlineTable(t)) => match t.get_mut(key) {
            Some(old) => replace_keeping_decor(old, value),
            None => push_inline(t, key, value),
        },
        other => {
            return Err(EditError::NotATable {
                path: path.to_owned(),
                found: other.type_name(),
            })
        }
    }
    Ok(())
}

/// Appends to an inline table. The space before the closing `}` belongs to the last value, so
/// it moves to the new last value: `{ a = 1 }` becomes `{ a = 1, b = 2 }`, not `{ a = 1 , b = 2 }`.
fn push_inline(table: &mut InlineTable, key: &str, mut value: Value) {
    if let Some((_, last)) = table.iter_mut().last() {
        if let Some(suffix) = last.decor().suffix().cloned() {
            last.decor_mut().set_suffix("");
            value.decor_mut().set_suffix(suffix);
        }
    }
    table.insert(key, value);
}

fn replace_keeping_decor(old: &mut Value, value: Value) {
    let decor = old.decor().clone();
    *old = value;
    *old.decor_mut() = decor;
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::ControlFile;

    const BUNDLED: &str = r#"# Live knobs (see README).
# A change that does not validate is refused.

[profiles.critical.endpoints]
frontdoor = { weight = 100 }   # primary
alt-cdn = { weight = 0 }
appgw = { weight = 0 }

[profiles.warm.endpoints]
frontdoor = { weight = 90 }
alt-cdn = { weight = 10 }

# Pin a region's clients:
# [regions.eu-west]
# drain = true
"#;

    fn load(text: &str) -> ControlFile {
        ControlFile::parse(text, Path::new("edited.toml"))
            .unwrap_or_else(|e| panic!("edited text does not parse: {e}\n{text}"))
    }

    fn weight(c: &ControlFile, profile: &str, endpoint: &str) -> Option<u32> {
        c.profiles.get(profile)?.endpoints.get(endpoint)?.weight
    }

    /// Lines of `after` that are not in `before`, and the reverse.
    fn changed_lines<'a>(before: &'a str, after: &'a str) -> (Vec<&'a str>, Vec<&'a str>) {
        let added = after.lines().filter(|l| !before.lines().any(|b| b == *l));
        let removed = before.lines().filter(|l| !after.lines().any(|a| a == *l));
        (added.collect(), removed.collect())
    }

    #[test]
    fn several_weights_change_only_their_lines() {
        let changes = [("frontdoor".to_owned(), 0), ("alt-cdn".to_owned(), 100)];
        let out = set_weights(BUNDLED, "critical", &changes).unwrap();
        let (added, removed) = changed_lines(BUNDLED, &out);
        assert_eq!(
            added,
            [
                "frontdoor = { weight = 0 }   # primary",
                "alt-cdn = { weight = 100 }"
            ]
        );
        assert_eq!(
            removed,
            [
                "frontdoor = { weight = 100 }   # primary",
                "alt-cdn = { weight = 0 }"
            ]
        );
        assert_eq!(out.lines().count(), BUNDLED.lines().count());
        let c = load(&out);
        assert_eq!(weight(&c, "critical", "frontdoor"), Some(0));
        assert_eq!(weight(&c, "critical", "alt-cdn"), Some(100));
        // The other profile's endpoint of the same name is untouched.
        assert_eq!(weight(&c, "warm", "frontdoor"), Some(90));
    }

    #[test]
    fn section_form_and_dotted_form_are_edited_in_place() {
        let text = "# head\n[profiles.p.endpoints.a]\nweight = 5 # keep me\nenabled = true\n\n[profiles.p.endpoints]\nb.weight = 7\n";
        let out = set_weights(text, "p", &[("a".into(), 6), ("b".into(), 8)]).unwrap();
        assert_eq!(
            out,
            "# head\n[profiles.p.endpoints.a]\nweight = 6 # keep me\nenabled = true\n\n[profiles.p.endpoints]\nb.weight = 8\n"
        );
        let c = load(&out);
        assert_eq!(weight(&c, "p", "a"), Some(6));
        assert_eq!(weight(&c, "p", "b"), Some(8));
    }

    #[test]
    fn missing_endpoint_is_added_inline_to_its_section() {
        let out = set_weights(BUNDLED, "warm", &[("appgw".into(), 3)]).unwrap();
        let (added, removed) = changed_lines(BUNDLED, &out);
        assert!(removed.is_empty(), "{removed:?}");
        assert_eq!(added.len(), 1, "{out}");
        assert!(added[0].starts_with("appgw = {") && added[0].contains("weight = 3"));
        let c = load(&out);
        assert_eq!(weight(&c, "warm", "appgw"), Some(3));
        assert_eq!(weight(&c, "critical", "appgw"), Some(0));
    }

    #[test]
    fn missing_profile_gets_a_section() {
        let out = set_weights(BUNDLED, "fresh", &[("x".into(), 1)]).unwrap();
        assert!(out.starts_with(BUNDLED.split("# Pin").next().unwrap().trim_end()));
        assert!(out.contains("[profiles.fresh.endpoints]\n"), "{out}");
        assert!(!out.contains("[profiles.fresh]\n"), "{out}");
        assert_eq!(weight(&load(&out), "fresh", "x"), Some(1));
        // Also from a file with no profiles at all.
        let out = set_weights("serial = 3\n", "p", &[("e".into(), 2)]).unwrap();
        let c = load(&out);
        assert_eq!(c.serial, Some(3));
        assert_eq!(weight(&c, "p", "e"), Some(2));
    }

    #[test]
    fn new_profile_section_goes_after_the_other_profiles() {
        let text = "[profiles.a.endpoints]\ne = { weight = 1 }\n\n[regions.r]\ndrain = true\n";
        let out = set_weights(text, "b", &[("e".into(), 2)]).unwrap();
        assert_eq!(
            out,
            "[profiles.a.endpoints]\ne = { weight = 1 }\n\n[profiles.b.endpoints]\ne = { weight = 2 }\n\n[regions.r]\ndrain = true\n"
        );
    }

    #[test]
    fn root_dotted_keys_stay_dotted() {
        let text = "profiles.p.endpoints.a.weight = 1 # note\n";
        let out = set_weights(text, "p", &[("a".into(), 4), ("b".into(), 5)]).unwrap();
        assert!(
            out.starts_with("profiles.p.endpoints.a.weight = 4 # note\n"),
            "{out}"
        );
        assert!(!out.contains('['), "{out}");
        let c = load(&out);
        assert_eq!(weight(&c, "p", "a"), Some(4));
        assert_eq!(weight(&c, "p", "b"), Some(5));
    }

    #[test]
    fn inline_profile_tables_stay_inline() {
        let text = "[profiles]\np = { endpoints = { a = { weight = 1 } } }\n";
        let out = set_weights(text, "p", &[("a".into(), 2), ("b".into(), 3)]).unwrap();
        assert_eq!(out.lines().count(), 2, "{out}");
        let c = load(&out);
        assert_eq!(weight(&c, "p", "a"), Some(2));
        assert_eq!(weight(&c, "p", "b"), Some(3));
    }

    #[test]
    fn enabled_and_drain_are_set() {
        let out = set_enabled(BUNDLED, "critical", "appgw", false).unwrap();
        let (added, _) = changed_lines(BUNDLED, &out);
        assert_eq!(added, ["appgw = { weight = 0, enabled = false }"]);
        let c = load(&out);
        assert_eq!(
            c.profiles["critical"].endpoints["appgw"].enabled,
            Some(false)
        );

        let out = set_drain(&out, "eu-west", true).unwrap();
        let c = load(&out);
        assert!(c.regions["eu-west"].drain);
        assert!(out.contains("[regions.eu-west]\ndrain = true\n"), "{out}");
        // The commented-out example is still there, once.
        assert_eq!(out.matches("# [regions.eu-west]").count(), 1);

        let out = set_drain(&out, "eu-west", false).unwrap();
        assert!(!load(&out).regions["eu-west"].drain);
        let drains = out.lines().filter(|l| l.starts_with("drain =")).count();
        assert_eq!(drains, 1, "{out}");
        assert!(out.contains("[regions.eu-west]\ndrain = false\n"), "{out}");
    }

    #[test]
    fn a_cell_drain_is_written_as_its_own_section_and_undone_in_place() {
        let out = set_cell_drain(BUNDLED, "eu-north", "en1", true).unwrap();
        let c = load(&out);
        assert!(c.cells["eu-north"]["en1"].drain);
        assert!(
            out.contains("[cells.eu-north.en1]\ndrain = true\n"),
            "{out}"
        );
        let out = set_cell_drain(&out, "global", "g2", true).unwrap();
        let c = load(&out);
        assert_eq!(c.cells.len(), 2);
        assert!(c.cells["global"]["g2"].drain);
        let out = set_cell_drain(&out, "eu-north", "en1", false).unwrap();
        let c = load(&out);
        assert!(!c.cells["eu-north"]["en1"].drain);
        assert_eq!(out.matches("[cells.eu-north.en1]").count(), 1, "{out}");
        assert!(set_cell_drain(BUNDLED, "eu.north", "en1", true).is_err());
        assert!(set_cell_drain(BUNDLED, "global", "g 1", true).is_err());
        let text = "[cells]\nglobal = { g1 = { drain = false } }\n";
        let out = set_cell_drain(text, "global", "g1", true).unwrap();
        assert!(load(&out).cells["global"]["g1"].drain, "{out}");
    }

    #[test]
    fn drain_on_an_inline_region() {
        let text = "[regions]\neu-west = { force = \"regional\" }\n";
        let out = set_drain(text, "eu-west", true).unwrap();
        assert_eq!(
            out,
            "[regions]\neu-west = { force = \"regional\", drain = true }\n"
        );
    }

    #[test]
    fn the_lock_is_exclusive_and_a_changed_file_is_not_replaced() {
        let dir = std::env::temp_dir().join(format!("steerdns-edit-lock-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let control = dir.join("control.toml");
        fs::write(&control, "serial = 1\n").unwrap();
        let held = ControlLock::acquire(&control, std::time::Duration::ZERO).unwrap();
        assert_eq!(
            ControlLock::path_for(&control),
            dir.join("control.toml.lock")
        );
        assert!(matches!(
            ControlLock::acquire(&control, std::time::Duration::from_millis(50)),
            Err(EditError::Locked { .. })
        ));
        drop(held);
        let _again = ControlLock::acquire(&control, std::time::Duration::ZERO).unwrap();
        // Someone wrote the file after the edit read it: refused, their change kept.
        fs::write(&control, "serial = 2\n").unwrap();
        assert!(matches!(
            replace_if_unchanged(&control, Some("serial = 1\n"), "serial = 3\n"),
            Err(EditError::ChangedUnderneath { .. })
        ));
        assert_eq!(fs::read_to_string(&control).unwrap(), "serial = 2\n");
        replace_if_unchanged(&control, Some("serial = 2\n"), "serial = 3\n").unwrap();
        assert_eq!(fs::read_to_string(&control).unwrap(), "serial = 3\n");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn bumped_serials_are_above_the_floor() {
        assert_eq!(
            bump_serial_above("serial = 5\n", 9).unwrap(),
            ("serial = 10\n".to_string(), Some(10))
        );
        assert_eq!(bump_serial_above("serial = 12\n", 9).unwrap().1, Some(13));
        assert_eq!(bump_serial_above("[regions]\n", 9).unwrap().1, None);
    }

    #[test]
    fn serial_is_replaced_or_added_on_top() {
        let out = set_serial("serial = 7 # ops\n[regions.a]\ndrain = true\n", 8).unwrap();
        assert_eq!(out, "serial = 8 # ops\n[regions.a]\ndrain = true\n");
        let out = set_serial(BUNDLED, 1).unwrap();
        assert_eq!(load(&out).serial, Some(1));
        assert!(out.find("serial = 1").unwrap() < out.find("[profiles").unwrap());
        assert!(matches!(
            set_serial("", u64::MAX),
            Err(EditError::SerialTooLarge(u64::MAX))
        ));
    }

    #[test]
    fn bump_serial_only_when_present() {
        let (out, serial) = bump_serial_if_present(BUNDLED).unwrap();
        assert_eq!((out.as_str(), serial), (BUNDLED, None));
        let (out, serial) = bump_serial_if_present("serial = 41\n").unwrap();
        assert_eq!((out.as_str(), serial), ("serial = 42\n", Some(42)));
        let err = bump_serial_if_present("serial = \"x\"\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "the top-level `serial` is \"x\", not a whole number"
        );
        assert!(bump_serial_if_present("serial = -1\n").is_err());
    }

    #[test]
    fn wrong_shapes_and_bad_input_are_errors() {
        let err = set_weights("[profiles\n", "p", &[("a".into(), 1)]).unwrap_err();
        assert!(matches!(err, EditError::Syntax { line: 1, .. }), "{err}");
        let err = set_weights("profiles = 5\n", "p", &[("a".into(), 1)]).unwrap_err();
        assert!(err.to_string().contains("`profiles` is integer"), "{err}");
        let err =
            set_weights("[profiles.p]\nendpoints = []\n", "p", &[("a".into(), 1)]).unwrap_err();
        assert!(err.to_string().contains("`profiles.p.endpoints`"), "{err}");
        let err = set_weights(
            "[profiles.p.endpoints.a.weight]\nx = 1\n",
            "p",
            &[("a".into(), 1)],
        )
        .unwrap_err();
        assert!(matches!(err, EditError::NotAValue { .. }), "{err}");
        let err = set_weights(BUNDLED, "p", &[("a".into(), 1001)]).unwrap_err();
        assert!(matches!(
            err,
            EditError::WeightTooLarge { weight: 1001, .. }
        ));
        let err = set_weights(BUNDLED, "p", &[("a".into(), 1), ("a".into(), 2)]).unwrap_err();
        assert!(matches!(err, EditError::DuplicateEndpoint { .. }));
        let err = set_weights(BUNDLED, "bad name", &[("a".into(), 1)]).unwrap_err();
        assert!(matches!(
            err,
            EditError::BadName {
                what: "profile",
                ..
            }
        ));
        assert!(set_drain(BUNDLED, "eu.west", true).is_err());
    }

    #[test]
    fn assignments_parse_with_clear_errors() {
        assert_eq!(
            parse_assignment("frontdoor=0").unwrap(),
            ("frontdoor".into(), 0)
        );
        assert_eq!(
            parse_assignment("alt-cdn=1000").unwrap(),
            ("alt-cdn".into(), 1000)
        );
        let cases = [
            ("x=", "weight is missing"),
            ("=5", "name is missing"),
            ("x=abc", "not a whole number"),
            ("x=-1", "not a whole number"),
            ("x=1001", "above the maximum"),
            ("x=99999999999", "above the maximum"),
            ("x", "no '='"),
        ];
        for (arg, expected) in cases {
            let err = parse_assignment(arg).unwrap_err().to_string();
            assert!(err.contains(expected), "{arg}: {err}");
            assert!(err.contains("ENDPOINT=WEIGHT"), "{arg}: {err}");
        }
        assert!(matches!(
            parse_assignment("a b=1"),
            Err(EditError::BadName { .. })
        ));
    }
}
