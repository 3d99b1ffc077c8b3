//! The subset of the Logging query language a runner uses to find a task's
//! lines: comparisons (`=`, `!=`, `>`, `>=`, `<`, `<=`, `:` for "has")
//! of a field path against a value, joined by `AND` or by juxtaposition.
//! Field paths are dotted, with quoted segments for keys holding dots or
//! slashes (`labels."run.googleapis.com/execution_name"`); values are
//! bare words or double-quoted strings. `timestamp` and `receiveTimestamp`
//! compare as instants. Anything else (`OR`, `NOT`, parentheses, …) is
//! refused with `INVALID_ARGUMENT` naming what it could not parse.

use std::cmp::Ordering;

use serde_json::Value;

use crate::error::ApiError;

/// A parsed filter: all of its comparisons must hold.
#[derive(Debug, Default)]
pub(crate) struct Filter {
    comparisons: Vec<Comparison>,
}

#[derive(Debug)]
struct Comparison {
    path: Vec<String>,
    op: Op,
    value: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    Has,
}

/// A lexical token.
#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    Op(Op),
    Dot,
}

impl Filter {
    pub(crate) fn parse(text: &str) -> Result<Self, ApiError> {
        let tokens = tokenize(text)?;
        let mut tokens = tokens.into_iter().peekable();
        let mut comparisons = Vec::new();
        while tokens.peek().is_some() {
            if tokens.peek() == Some(&Token::Word("AND".to_owned())) {
                tokens.next();
                continue;
            }
            let mut path = Vec::new();
            let op = loop {
                match tokens.next() {
                    Some(Token::Word(w) | Token::Quoted(w)) if is_keyword(&w) => {
                        return Err(unsupported(&w, text));
                    }
                    Some(Token::Word(w) | Token::Quoted(w)) => path.push(w),
                    Some(Token::Dot) if !path.is_empty() => {}
                    Some(Token::Op(op)) if !path.is_empty() => break op,
                    other => return Err(unexpected(other, text)),
                }
            };
            let value = match tokens.next() {
                Some(Token::Word(w) | Token::Quoted(w)) => w,
                other => return Err(unexpected(other, text)),
            };
            comparisons.push(Comparison { path, op, value });
        }
        Ok(Self { comparisons })
    }

    pub(crate) fn matches(&self, entry: &Value) -> bool {
        self.comparisons.iter().all(|c| c.holds(entry))
    }
}

impl Comparison {
    fn holds(&self, entry: &Value) -> bool {
        let Some(field) = self.path.iter().try_fold(entry, |v, key| v.get(key)) else {
            return false;
        };
        let actual = match field {
            Value::String(s) => s.clone(),
            Value::Number(_) | Value::Bool(_) => field.to_string(),
            _ => return false,
        };
        if self.op == Op::Has {
            return actual.contains(&self.value);
        }
        let ordering = match self.path.last().map(String::as_str) {
            Some("timestamp" | "receiveTimestamp") => {
                match (instant(&actual), instant(&self.value)) {
                    (Some(a), Some(b)) => a.cmp(&b),
                    _ => return false,
                }
            }
            Some("logName") => actual
                .replace("%2F", "/")
                .cmp(&self.value.replace("%2F", "/")),
            _ => actual.cmp(&self.value),
        };
        match self.op {
            Op::Eq => ordering == Ordering::Equal,
            Op::Ne => ordering != Ordering::Equal,
            Op::Gt => ordering == Ordering::Greater,
            Op::Ge => ordering != Ordering::Less,
            Op::Lt => ordering == Ordering::Less,
            Op::Le => ordering != Ordering::Greater,
            Op::Has => unreachable!("handled above"),
        }
    }
}

fn instant(text: &str) -> Option<jiff::Timestamp> {
    text.parse().ok()
}

fn is_keyword(word: &str) -> bool {
    matches!(word, "OR" | "NOT")
}

fn tokenize(text: &str) -> Result<Vec<Token>, ApiError> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '"' => {
                chars.next();
                tokens.push(Token::Quoted(quoted(&mut chars, text)?));
            }
            '.' => {
                chars.next();
                tokens.push(Token::Dot);
            }
            '=' | '!' | '<' | '>' | ':' => tokens.push(Token::Op(operator(&mut chars, text)?)),
            '(' | ')' | '-' => return Err(unsupported(&c.to_string(), text)),
            _ => {
                let mut word = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || "\"=!<>:.()".contains(c) {
                        break;
                    }
                    word.push(c);
                    chars.next();
                }
                tokens.push(Token::Word(word));
            }
        }
    }
    Ok(tokens)
}

/// Reads a double-quoted string after its opening quote.
fn quoted(chars: &mut impl Iterator<Item = char>, text: &str) -> Result<String, ApiError> {
    let mut value = String::new();
    loop {
        match chars.next() {
            Some('"') => return Ok(value),
            Some('\\') => value.extend(chars.next()),
            Some(c) => value.push(c),
            None => {
                return Err(ApiError::invalid(format!(
                    "Unparseable filter: unterminated string in '{text}'."
                )));
            }
        }
    }
}

fn operator(
    chars: &mut std::iter::Peekable<impl Iterator<Item = char>>,
    text: &str,
) -> Result<Op, ApiError> {
    let first = chars.next().unwrap_or_default();
    let equals_follows = chars.next_if_eq(&'=').is_some();
    match (first, equals_follows) {
        ('=', false) => Ok(Op::Eq),
        ('!', true) => Ok(Op::Ne),
        ('>', false) => Ok(Op::Gt),
        ('>', true) => Ok(Op::Ge),
        ('<', false) => Ok(Op::Lt),
        ('<', true) => Ok(Op::Le),
        (':', false) => Ok(Op::Has),
        _ => Err(unsupported(&first.to_string(), text)),
    }
}

fn unsupported(what: &str, text: &str) -> ApiError {
    ApiError::invalid(format!(
        "Unparseable filter: '{what}' is not supported by the fake in '{text}'; use AND-ed comparisons such as field=\"value\"."
    ))
}

fn unexpected(token: Option<Token>, text: &str) -> ApiError {
    let found = match token {
        None => "end of filter".to_owned(),
        Some(token) => format!("{token:?}"),
    };
    ApiError::invalid(format!(
        "Unparseable filter: unexpected {found} in '{text}'."
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry() -> Value {
        json!({
            "logName": "projects/p/logs/run.googleapis.com%2Fstdout",
            "resource": {"type": "cloud_run_job", "labels": {"job_name": "migrate"}},
            "labels": {"run.googleapis.com/execution_name": "migrate-abcde"},
            "textPayload": "hello world",
            "timestamp": "2026-01-02T03:04:05.5Z",
        })
    }

    #[test]
    fn and_ed_comparisons_of_quoted_and_bare_values_match() {
        let filter = Filter::parse(
            r#"resource.type="cloud_run_job" AND resource.labels.job_name=migrate
               labels."run.googleapis.com/execution_name"="migrate-abcde" textPayload:world"#,
        )
        .unwrap();
        assert!(filter.matches(&entry()));
        let other = Filter::parse("resource.labels.job_name=other").unwrap();
        assert!(!other.matches(&entry()));
    }

    #[test]
    fn timestamps_compare_as_instants_and_log_names_either_way() {
        let after = Filter::parse(r#"timestamp>="2026-01-02T03:04:05+00:00""#).unwrap();
        assert!(after.matches(&entry()));
        let later = Filter::parse(r#"timestamp>"2026-01-02T03:04:06Z""#).unwrap();
        assert!(!later.matches(&entry()));
        let log = Filter::parse(r#"logName="projects/p/logs/run.googleapis.com/stdout""#).unwrap();
        assert!(log.matches(&entry()));
    }

    #[test]
    fn what_it_cannot_parse_is_named() {
        for (filter, named) in [
            ("a=1 OR b=2", "'OR'"),
            ("(a=1)", "'('"),
            ("a=", "end of filter"),
            ("a==1", "'='"),
        ] {
            let error = Filter::parse(filter).unwrap_err();
            assert!(error.message.contains(named), "{filter}: {}", error.message);
        }
    }
}
