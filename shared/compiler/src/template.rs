//! Templates in commands, environment values and parameter values:
//! `{{.Params.name}}`, `{{.Constants.name}}` and `{{.Builtins.Service.Name}}`
//! (and the other built-ins). Only field references are supported, which
//! keeps every reference checkable at compile time: an unknown name is an
//! error, never an empty string.

use std::fmt;

/// A value the compiler fills in for every instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    ApplicationName,
    ApplicationId,
    ReleaseChannelName,
    ReleaseChannelId,
    ServiceName,
    ServiceId,
}

impl Builtin {
    const ALL: [(&'static str, Builtin); 6] = [
        ("Application.Name", Builtin::ApplicationName),
        ("Application.Id", Builtin::ApplicationId),
        ("ReleaseChannel.Name", Builtin::ReleaseChannelName),
        ("ReleaseChannel.Id", Builtin::ReleaseChannelId),
        ("Service.Name", Builtin::ServiceName),
        ("Service.Id", Builtin::ServiceId),
    ];

    fn parse(path: &str) -> Option<Builtin> {
        Self::ALL.iter().find(|(p, _)| *p == path).map(|(_, b)| *b)
    }

    fn path(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, b)| *b == self)
            .map_or("", |(p, _)| p)
    }
}

/// What a `{{ … }}` refers to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reference {
    Param(String),
    Constant(String),
    Builtin(Builtin),
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reference::Param(name) => write!(f, "{{{{.Params.{name}}}}}"),
            Reference::Constant(name) => write!(f, "{{{{.Constants.{name}}}}}"),
            Reference::Builtin(b) => write!(f, "{{{{.Builtins.{}}}}}", b.path()),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Piece {
    Text(String),
    Ref(Reference),
}

/// A parsed template string.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Template {
    pieces: Vec<Piece>,
}

impl Template {
    /// Parses `raw`; the error says which expression is wrong and why.
    pub fn parse(raw: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut rest = raw;
        while let Some(start) = rest.find("{{") {
            if start > 0 {
                pieces.push(Piece::Text(rest[..start].to_owned()));
            }
            let after = &rest[start + 2..];
            let end = after
                .find("}}")
                .ok_or_else(|| format!("unclosed '{{{{' in {raw:?}"))?;
            pieces.push(Piece::Ref(parse_reference(after[..end].trim())?));
            rest = &after[end + 2..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_owned()));
        }
        Ok(Template { pieces })
    }

    /// Text used as it is, even if it has `{{`.
    pub fn literal(text: &str) -> Template {
        Template {
            pieces: vec![Piece::Text(text.to_owned())],
        }
    }

    pub fn references(&self) -> impl Iterator<Item = &Reference> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Ref(r) => Some(r),
            Piece::Text(_) => None,
        })
    }

    /// The text before the first reference: what every rendering starts with.
    pub fn literal_prefix(&self) -> &str {
        match self.pieces.first() {
            Some(Piece::Text(text)) => text,
            _ => "",
        }
    }

    /// The reference, when the whole template is exactly one reference.
    pub fn sole_reference(&self) -> Option<&Reference> {
        match self.pieces.as_slice() {
            [Piece::Ref(r)] => Some(r),
            _ => None,
        }
    }

    /// Fills in every reference; `resolve` returns `None` for a name that
    /// has no value, which is reported with the reference.
    pub fn render(&self, resolve: impl Fn(&Reference) -> Option<String>) -> Result<String, String> {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Ref(r) => match resolve(r) {
                    Some(value) => out.push_str(&value),
                    None => return Err(format!("{r} has no value")),
                },
            }
        }
        Ok(out)
    }
}

fn parse_reference(expr: &str) -> Result<Reference, String> {
    let unsupported = || {
        format!(
            "unsupported template expression {{{{{expr}}}}}: only {{{{.Params.name}}}}, \
             {{{{.Constants.name}}}} and {{{{.Builtins.Service.Name}}}}-style references are supported"
        )
    };
    let path = expr.strip_prefix('.').ok_or_else(unsupported)?;
    if let Some(name) = path.strip_prefix("Params.") {
        check_identifier(name).map_err(|_| unsupported())?;
        return Ok(Reference::Param(name.to_owned()));
    }
    if let Some(name) = path.strip_prefix("Constants.") {
        check_identifier(name).map_err(|_| unsupported())?;
        return Ok(Reference::Constant(name.to_owned()));
    }
    if let Some(builtin) = path.strip_prefix("Builtins.") {
        return Builtin::parse(builtin)
            .map(Reference::Builtin)
            .ok_or_else(|| {
                let known: Vec<String> = Builtin::ALL
                    .iter()
                    .map(|(p, _)| format!(".Builtins.{p}"))
                    .collect();
                format!(
                    "unknown built-in {{{{{expr}}}}}; available: {}",
                    known.join(", ")
                )
            });
    }
    Err(unsupported())
}

/// Parameter and constant names: letters, digits and `_`, not starting with
/// a digit (so they read as template fields).
pub fn check_identifier(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid name: use letters, digits and '_', starting with a letter"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_text_and_references() {
        let t = Template::parse("--service={{.Params.service}}-{{ .Constants.region }}/{{.Builtins.ReleaseChannel.Name}}").unwrap();
        let refs: Vec<String> = t.references().map(ToString::to_string).collect();
        assert_eq!(
            refs,
            vec![
                "{{.Params.service}}",
                "{{.Constants.region}}",
                "{{.Builtins.ReleaseChannel.Name}}"
            ]
        );
        let rendered = t
            .render(|r| match r {
                Reference::Param(_) => Some("web".into()),
                Reference::Constant(_) => Some("eu".into()),
                Reference::Builtin(_) => Some("prod".into()),
            })
            .unwrap();
        assert_eq!(rendered, "--service=web-eu/prod");
    }

    #[test]
    fn rejects_what_cannot_be_checked() {
        for (raw, why) in [
            ("{{.Params.x", "unclosed"),
            ("{{ printf \"%s\" .Params.x }}", "unsupported"),
            ("{{.Values.x}}", "unsupported"),
            (
                "{{.Builtins.Service.Version}}",
                "available: .Builtins.Application.Name",
            ),
            ("{{.Params.a-b}}", "unsupported"),
        ] {
            let err = Template::parse(raw).unwrap_err();
            assert!(err.contains(why), "{raw}: {err}");
        }
    }

    #[test]
    fn sole_reference_is_only_a_whole_value() {
        assert!(
            Template::parse("{{.Params.db}}")
                .unwrap()
                .sole_reference()
                .is_some()
        );
        assert!(
            Template::parse("x{{.Params.db}}")
                .unwrap()
                .sole_reference()
                .is_none()
        );
    }

    #[test]
    fn missing_values_are_errors_not_empty_strings() {
        let t = Template::parse("a{{.Params.x}}").unwrap();
        assert_eq!(
            t.render(|_| None).unwrap_err(),
            "{{.Params.x}} has no value"
        );
    }
}
