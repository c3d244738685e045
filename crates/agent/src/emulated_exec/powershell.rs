//! How PowerShell looks: cmdlet parameters (names case-insensitive, unique prefixes,
//! `-Name:value`), objects shown as lists or tables, `(…).Property`, and its error records.

use super::term::Output;

/// Longest property value a list or table shows; longer ones end in `...` (the value itself,
/// as `(…).Property` prints it, is whole).
const SHOWN_VALUE_CHARS: usize = 400;

/// One parameter a cmdlet takes.
pub(super) struct Param {
    pub(super) name: &'static str,
    pub(super) aliases: &'static [&'static str],
    /// A switch takes no value (`-UseBasicParsing`).
    pub(super) switch: bool,
}

/// A parameter taking a value.
pub(super) const fn value(name: &'static str, aliases: &'static [&'static str]) -> Param {
    Param {
        name,
        aliases,
        switch: false,
    }
}

/// A switch parameter.
pub(super) const fn switch(name: &'static str, aliases: &'static [&'static str]) -> Param {
    Param {
        name,
        aliases,
        switch: true,
    }
}

/// Parameters bound from a command line.
#[derive(Debug, Default)]
pub(super) struct Bound {
    named: Vec<(&'static str, String)>,
    pub(super) positional: Vec<String>,
}

impl Bound {
    /// The value of parameter `name` (its canonical name).
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.named
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether switch `name` was given (and not `-Name:$false`).
    pub(super) fn on(&self, name: &str) -> bool {
        self.get(name)
            .is_some_and(|v| !v.eq_ignore_ascii_case("$false"))
    }

    /// `name`, or else the `index`th positional argument.
    pub(super) fn get_or_positional(&self, name: &str, index: usize) -> Option<&str> {
        self.get(name)
            .or_else(|| self.positional.get(index).map(String::as_str))
    }
}

/// Why arguments do not bind, in PowerShell's words.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum BindError {
    #[error("A parameter cannot be found that matches parameter name '{0}'.")]
    Unknown(String),
    #[error("Parameter cannot be processed because the parameter name '{0}' is ambiguous.")]
    Ambiguous(String),
    #[error(
        "Missing an argument for parameter '{0}'. Specify a parameter of type 'System.String' and try again."
    )]
    Missing(&'static str),
}

impl BindError {
    pub(super) fn error_id(&self) -> &'static str {
        match self {
            Self::Unknown(_) => "NamedParameterNotFound",
            Self::Ambiguous(_) => "AmbiguousParameter",
            Self::Missing(_) => "MissingArgument",
        }
    }
}

/// Binds `args` to `params` as PowerShell does: `-Name value`, `-Name:value`, a unique prefix
/// of a name, aliases, and the rest positional. Common parameters (`-Verbose`,
/// `-ErrorAction X`, …) are accepted; `-Verbose` is bound, the others ignored.
pub(super) fn bind(args: &[String], params: &[Param]) -> Result<Bound, BindError> {
    const COMMON: [Param; 5] = [
        switch("Verbose", &["vb"]),
        switch("Debug", &["db"]),
        value("ErrorAction", &["ea"]),
        value("WarningAction", &["wa"]),
        value("InformationAction", &["infa"]),
    ];
    let mut bound = Bound::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let Some(spelled) = arg.strip_prefix('-').filter(|s| is_parameter_name(s)) else {
            bound.positional.push(arg.clone());
            continue;
        };
        let (spelled, inline) = match spelled.split_once(':') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (spelled, None),
        };
        let all = params.iter().chain(COMMON.iter());
        let exact: Vec<&Param> = all
            .clone()
            .filter(|p| {
                p.name.eq_ignore_ascii_case(spelled)
                    || p.aliases.iter().any(|a| a.eq_ignore_ascii_case(spelled))
            })
            .collect();
        let matched: Vec<&Param> = if exact.is_empty() {
            let lower = spelled.to_ascii_lowercase();
            all.filter(|p| p.name.to_ascii_lowercase().starts_with(&lower))
                .collect()
        } else {
            exact
        };
        let param = match matched.as_slice() {
            [one] => *one,
            [] => return Err(BindError::Unknown(spelled.to_string())),
            _ => return Err(BindError::Ambiguous(spelled.to_string())),
        };
        let value = if param.switch {
            inline.unwrap_or_else(|| "$true".to_string())
        } else {
            match inline {
                Some(v) => v,
                None => rest.next().cloned().ok_or(BindError::Missing(param.name))?,
            }
        };
        bound.named.push((param.name, value));
    }
    Ok(bound)
}

/// `-Name` is a parameter; `-1` or `-` are values.
fn is_parameter_name(text: &str) -> bool {
    text.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == '?')
}

/// An object as PowerShell shows it: ordered properties with their (string) values.
#[derive(Clone, Debug, Default)]
pub(super) struct PsObject {
    pub(super) props: Vec<(String, String)>,
}

impl PsObject {
    pub(super) fn with(mut self, name: &str, value: impl Into<String>) -> Self {
        self.props.push((name.to_string(), value.into()));
        self
    }

    fn find(&self, name: &str) -> Option<&str> {
        self.props
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// How a cmdlet's objects are shown by default.
pub(super) enum View<'a> {
    /// `Name : value` blocks (Format-List).
    List,
    /// Columns (Format-Table); `None` for all of the first object's properties.
    Table(Option<&'a [&'a str]>),
}

/// Writes `objects` as PowerShell would: the `select`ed property's whole values one per line,
/// or the default view.
pub(super) async fn emit(out: &Output, objects: &[PsObject], view: View<'_>, select: Option<&str>) {
    if let Some(property) = select {
        let mut text = String::new();
        for object in objects {
            if let Some(value) = object.find(property) {
                text.push_str(value);
                if !value.ends_with('\n') {
                    text.push('\n');
                }
            }
        }
        out.out(&text).await;
        return;
    }
    if objects.is_empty() {
        return;
    }
    let text = match view {
        View::List => format_list(objects),
        View::Table(columns) => format_table(objects, columns),
    };
    out.out(&text).await;
}

fn shown(value: &str) -> String {
    if value.chars().count() <= SHOWN_VALUE_CHARS {
        return value.to_string();
    }
    let mut cut: String = value.chars().take(SHOWN_VALUE_CHARS).collect();
    cut.push_str("...");
    cut
}

/// Format-List: a blank line, then for each object its properties with names padded to one
/// width and continuation lines indented under the values, then two blank lines.
pub(super) fn format_list(objects: &[PsObject]) -> String {
    let mut text = String::from("\n");
    for object in objects {
        let width = object
            .props
            .iter()
            .map(|(n, _)| n.chars().count())
            .max()
            .unwrap_or(0);
        for (name, value) in &object.props {
            let value = shown(value);
            let mut lines = value.lines();
            text.push_str(&format!("{name:width$} : {}\n", lines.next().unwrap_or("")));
            for line in lines {
                text.push_str(&format!("{:indent$}{line}\n", "", indent = width + 3));
            }
        }
        text.push('\n');
    }
    text.push('\n');
    text
}

/// Format-Table: a blank line, headers underlined with dashes, one row per object (values cut
/// to their first line), a blank line.
pub(super) fn format_table(objects: &[PsObject], columns: Option<&[&str]>) -> String {
    let names: Vec<String> = match columns {
        Some(columns) => columns.iter().map(|c| c.to_string()).collect(),
        None => objects
            .first()
            .map(|o| o.props.iter().map(|(n, _)| n.clone()).collect())
            .unwrap_or_default(),
    };
    let rows: Vec<Vec<String>> = objects
        .iter()
        .map(|o| {
            names
                .iter()
                .map(|n| shown(o.find(n).unwrap_or("").lines().next().unwrap_or("")))
                .collect()
        })
        .collect();
    let widths: Vec<usize> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain(std::iter::once(n.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: Vec<String>| -> String {
        let last = cells.len().saturating_sub(1);
        let mut row = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            if i == last {
                row.push_str(&cell);
            } else {
                row.push_str(&format!("{cell:w$} ", w = widths[i]));
            }
        }
        format!("{}\n", row.trim_end())
    };
    let mut text = String::from("\n");
    text.push_str(&line(names.clone()));
    text.push_str(&line(
        names
            .iter()
            .map(|n| "-".repeat(n.chars().count()))
            .collect(),
    ));
    for row in rows {
        text.push_str(&line(row));
    }
    text.push('\n');
    text
}

/// A collection as PowerShell shows it in a property: `{a, b, c, d...}` (four items at most).
pub(super) fn collection(items: &[String]) -> String {
    let mut text = items.iter().take(4).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > 4 {
        text.push_str("...");
    }
    format!("{{{text}}}")
}

/// What went wrong, for [`error_record`].
pub(super) struct ErrorRecord<'a> {
    /// `Invoke-WebRequest`.
    pub(super) command: &'a str,
    pub(super) message: &'a str,
    /// `InvalidOperation`.
    pub(super) category: &'a str,
    /// `(target:String)` in the category line.
    pub(super) target: &'a str,
    /// `WebException`.
    pub(super) reason: &'a str,
    /// `WebCmdletWebResponseException,Microsoft.PowerShell.Commands.InvokeWebRequestCommand`.
    pub(super) error_id: &'a str,
}

/// An error as Windows PowerShell 5.1 prints it, pointing at the statement `text`.
pub(super) fn error_record(text: &str, e: &ErrorRecord<'_>) -> String {
    let width = text.chars().count().max(1);
    format!(
        "{command} : {message}\nAt line:1 char:1\n+ {text}\n+ {tildes}\n    + CategoryInfo          : {category}: ({target}) [{command}], {reason}\n    + FullyQualifiedErrorId : {error_id}\n \n",
        command = e.command,
        message = e.message,
        tildes = "~".repeat(width),
        category = e.category,
        target = e.target,
        reason = e.reason,
        error_id = e.error_id,
    )
}

/// The error record for arguments that did not bind.
pub(super) fn bind_error(text: &str, command: &str, full_name: &str, error: &BindError) -> String {
    error_record(
        text,
        &ErrorRecord {
            command,
            message: &error.to_string(),
            category: "InvalidArgument",
            target: ":",
            reason: "ParameterBindingException",
            error_id: &format!("{},{full_name}", error.error_id()),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARAMS: [Param; 3] = [
        value("Uri", &[]),
        switch("UseBasicParsing", &[]),
        value("UserAgent", &[]),
    ];

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parameters_bind_by_name_prefix_and_position() {
        let bound = bind(&args(&["-uri:http://a", "-usebasic", "x"]), &PARAMS).expect("binds");
        assert_eq!(bound.get("Uri"), Some("http://a"));
        assert!(bound.on("UseBasicParsing"));
        assert_eq!(bound.positional, ["x"]);
        assert_eq!(
            bind(&args(&["-Us", "x"]), &PARAMS).err(),
            Some(BindError::Ambiguous("Us".to_string()))
        );
        assert_eq!(
            bind(&args(&["-Nope"]), &PARAMS).err(),
            Some(BindError::Unknown("Nope".to_string()))
        );
        assert_eq!(
            bind(&args(&["-Uri"]), &PARAMS).err(),
            Some(BindError::Missing("Uri"))
        );
        assert!(bind(&args(&["-Verbose", "-1"]), &PARAMS).is_ok());
    }

    #[test]
    fn lists_align_names_and_indent_continuations() {
        let object = PsObject::default()
            .with("StatusCode", "200")
            .with("Content", "a\nb");
        assert_eq!(
            format_list(&[object]),
            "\nStatusCode : 200\nContent    : a\n             b\n\n\n"
        );
    }

    #[test]
    fn tables_pad_columns() {
        let rows = [
            PsObject::default().with("Name", "web").with("Type", "A"),
            PsObject::default()
                .with("Name", "kubernetes")
                .with("Type", "A"),
        ];
        assert_eq!(
            format_table(&rows, None),
            "\nName       Type\n----       ----\nweb        A\nkubernetes A\n\n"
        );
    }
}
