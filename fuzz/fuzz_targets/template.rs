//! Fuzzes template parsing and rendering (`{{.Params.x}}` and friends).
//! Beyond not panicking: errors say something, every `{{` of an accepted
//! template is one reference, text without references renders as written,
//! and a reference without a value is an error naming it, never an empty
//! string.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vergence_compiler::template::{Reference, Template, check_identifier};

fuzz_target!(|data: &[u8]| {
    let raw = String::from_utf8_lossy(data);
    // Names are checked on their own too (parameter and constant names).
    if let Err(why) = check_identifier(&raw) {
        assert!(!why.is_empty());
    }
    let template = match Template::parse(&raw) {
        Ok(template) => template,
        Err(why) => {
            assert!(!why.trim().is_empty(), "empty parse error for {raw:?}");
            return;
        }
    };
    let references: Vec<&Reference> = template.references().collect();
    assert_eq!(
        references.len(),
        raw.matches("{{").count(),
        "{raw:?} parsed to {references:?}"
    );
    let without_values = template.render(|_| None);
    match references.first() {
        None => assert_eq!(without_values.as_deref(), Ok(&*raw)),
        Some(first) => {
            let why = without_values.expect_err("a reference without a value rendered");
            assert!(
                why.contains(&first.to_string()),
                "{why:?} does not name {first}"
            );
        }
    }
    // Empty values leave the text alone: never longer than the template,
    // and empty for a template that is one reference.
    let text = template
        .render(|_| Some(String::new()))
        .expect("every reference has a value");
    assert!(text.len() < raw.len() || references.is_empty());
    if template.sole_reference().is_some() {
        assert!(text.is_empty(), "{raw:?} left {text:?}");
    }
    // A rendered reference is spelled canonically and parses back to itself.
    for reference in references {
        let spelled = reference.to_string();
        let again = Template::parse(&spelled).expect("a reference's own spelling parses");
        assert_eq!(again.sole_reference(), Some(reference));
    }
    let literal = Template::literal(&raw).render(|_| None);
    assert_eq!(literal.as_deref(), Ok(&*raw));
});
