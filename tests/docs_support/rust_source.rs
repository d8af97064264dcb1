//! Reads a struct's fields and doc comments out of rustfmt-formatted source: the server's
//! request types document their JSON fields there, and nowhere else.

/// One field of a struct.
pub struct Field {
    /// Its name in JSON (`#[serde(rename)]` applied).
    pub name: String,
    /// Its Rust type.
    pub ty: String,
    /// Its doc comment, on one line.
    pub doc: String,
    /// `#[serde(flatten)]`: its type's fields stand in the parent's object.
    pub flatten: bool,
}

/// A struct's doc comment and fields.
pub struct Struct {
    /// The doc comment above it, on one line.
    pub doc: String,
    /// Its fields in order.
    pub fields: Vec<Field>,
}

/// `pub struct name` in `source`; panics when there is none, so a renamed type fails the test.
pub fn parse_struct(source: &str, name: &str) -> Struct {
    let lines: Vec<&str> = source.lines().collect();
    let start = lines
        .iter()
        .position(|line| *line == format!("pub struct {name} {{"))
        .unwrap_or_else(|| panic!("no `pub struct {name}` in the source"));
    let doc_lines = lines[..start]
        .iter()
        .rev()
        .skip_while(|line| line.starts_with("#["))
        .take_while(|line| line.starts_with("///"));
    let mut doc: Vec<&str> = doc_lines.map(|line| doc_text(line)).collect();
    doc.reverse();

    let mut fields = Vec::new();
    let (mut field_doc, mut rename, mut flatten) = (Vec::new(), None, false);
    for line in lines[start + 1..].iter().map(|line| line.trim()).take_while(|line| *line != "}") {
        if line.starts_with("///") {
            field_doc.push(doc_text(line));
        } else if let Some(attribute) = line.strip_prefix("#[serde(") {
            flatten |= attribute.contains("flatten");
            rename = attribute
                .split_once("rename = \"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(r, _)| r.to_owned());
        } else if let Some((field, ty)) = line.strip_prefix("pub ").and_then(|l| l.split_once(": ")) {
            fields.push(Field {
                name: rename.take().unwrap_or_else(|| field.to_owned()),
                ty: ty.trim_end_matches(',').to_owned(),
                doc: one_line(&field_doc),
                flatten,
            });
            (field_doc, flatten) = (Vec::new(), false);
        }
    }
    Struct { doc: one_line(&doc), fields }
}

/// A `///` line's text.
fn doc_text(line: &str) -> &str {
    line.trim().trim_start_matches("///").trim()
}

/// Doc lines joined, intra-doc links (``[`crate::a::B`]``) shown as their last name.
fn one_line(lines: &[&str]) -> String {
    let text = lines.join(" ");
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find("[`") {
        let Some(len) = rest[start..].find("`]") else { break };
        let path = &rest[start + 2..start + len];
        out.push_str(&rest[..start]);
        out.push_str(&format!("`{}`", path.rsplit("::").next().unwrap_or(path)));
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}
