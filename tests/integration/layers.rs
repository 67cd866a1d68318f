//! The crate's layers, held by reading its imports (src/lib.rs draws them; docs/code-map.md
//! names their files): every `crate::…` and `super::…` path in `src/` is resolved to the
//! layer it names, and an import of a layer above the importer's, of a sibling service, or
//! anything of Lazarus from `message/` or `support/`, is refused — as is a circle between
//! the modules of one layer. No services needed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use crate::manual::{files, root};

/// The layers, from the ground up. A layer may import those of a lower rank; the services
/// share a rank and import none of one another; `support` and `message` import nothing of
/// Lazarus.
const LAYERS: [(&str, u8); 14] = [
    ("support", 0),
    ("message", 0),
    ("archive", 1),
    ("runtime", 2),
    ("amqp", 3),
    ("auth", 4),
    ("notify", 4),
    ("replay", 4),
    ("retention", 4),
    ("web", 5),
    ("config", 6),
    ("startup", 7),
    ("cli", 8),
    ("main", 9),
];

/// Pairs kept apart although the first stands above the second: the command line borrows
/// nothing of the web (formatting both use is `support`'s).
const APART: [(&str, &str); 1] = [("cli", "web")];

/// Files that are no layer's: the module tree itself, and property tests (test code only).
const OUTSIDE: [&str; 2] = ["lib", "proptests"];

fn rank(layer: &str) -> Option<u8> {
    LAYERS.iter().find(|(l, _)| *l == layer).map(|&(_, r)| r)
}

/// `src/amqp/wire/codec.rs` as its module path: `["amqp", "wire", "codec"]` (`mod.rs` is
/// its folder's module).
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The code without its comments (doc links name paths too, but import nothing).
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_block = 0usize;
    for line in text.lines() {
        let mut rest = line;
        loop {
            if in_block > 0 {
                match rest.find("*/") {
                    Some(end) => {
                        in_block -= 1;
                        rest = &rest[end + 2..];
                    }
                    None => break,
                }
            } else {
                let line_comment = rest.find("//");
                let block = rest.find("/*");
                match (line_comment, block) {
                    (Some(l), b) if b.is_none_or(|b| l < b) => {
                        out.push_str(&rest[..l]);
                        break;
                    }
                    (_, Some(b)) => {
                        out.push_str(&rest[..b]);
                        in_block += 1;
                        rest = &rest[b + 2..];
                    }
                    _ => {
                        out.push_str(rest);
                        break;
                    }
                }
            }
        }
        out.push('\n');
    }
    out
}

fn ident_at(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// Every module path `code` (of the module at `here`) names by `crate::` or `super::`,
/// as absolute paths of one or two parts: `["archive"]`, `["message", "body"]`.
fn named_paths(code: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let mut path = Vec::new();
        let mut rest = &code[at + "crate::".len()..];
        while path.len() < 2 {
            let ident = ident_at(rest);
            if ident.is_empty() {
                break;
            }
            path.push(ident.to_string());
            match rest[ident.len()..].strip_prefix("::") {
                Some(more) => rest = more,
                None => break,
            }
        }
        if !path.is_empty() {
            out.push(path);
        }
    }
    for (at, _) in code.match_indices("super::") {
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        if code[..at].ends_with("super::") {
            continue; // counted from the first `super::` of the run
        }
        let mut base = here.to_vec();
        let mut rest = &code[at..];
        while let Some(more) = rest.strip_prefix("super::") {
            base.pop();
            rest = more;
        }
        let ident = ident_at(rest);
        if ident.is_empty() || ident == "super" || ident == "self" {
            continue;
        }
        // `super::*` in a test module, or a name of the parent: the parent module itself.
        let mut path = base;
        path.push(ident.to_string());
        path.truncate(2);
        out.push(path);
    }
    out
}

struct Finding {
    refused: Vec<String>,
    /// Edges between modules of one layer: ("message::body", "message::structured").
    siblings: BTreeMap<String, BTreeSet<String>>,
    files_read: usize,
}

fn read_the_tree(src: &Path) -> Finding {
    let mut sources = Vec::new();
    files(src, "rs", &mut sources);
    let mut finding = Finding {
        refused: Vec::new(),
        siblings: BTreeMap::new(),
        files_read: 0,
    };
    let module_names: BTreeSet<Vec<String>> = sources
        .iter()
        .map(|p| module_path(p.strip_prefix(src).unwrap()))
        .collect();
    for path in &sources {
        let relative = path.strip_prefix(src).unwrap();
        let here = module_path(relative);
        let layer = here[0].as_str();
        if OUTSIDE.contains(&layer) {
            continue;
        }
        finding.files_read += 1;
        let shown = format!("src/{}", relative.display());
        let Some(own_rank) = rank(layer) else {
            finding.refused.push(format!(
                "{shown} stands in no layer (src/lib.rs lists them)"
            ));
            continue;
        };
        let code = without_comments(&fs::read_to_string(path).unwrap());
        for named in named_paths(&code, &here) {
            let target = named[0].as_str();
            if target == layer {
                // Within the layer: note which of its modules names which.
                if here.len() > 1 && named.len() > 1 && here[1] != named[1] {
                    let sub = named[..2].to_vec();
                    if module_names.contains(&sub) {
                        finding
                            .siblings
                            .entry(format!("{}::{}", here[0], here[1]))
                            .or_default()
                            .insert(named[..2].join("::"));
                    }
                }
                continue;
            }
            let Some(target_rank) = rank(target) else {
                continue; // a name of the crate root that is no module (a macro, `crate::Foo`)
            };
            let why = if own_rank == 0 {
                Some("imports nothing of Lazarus")
            } else if target_rank > own_rank {
                Some("may not import a layer above its own")
            } else if target_rank == own_rank {
                Some("may not import a layer beside its own")
            } else if APART.contains(&(layer, target)) {
                Some("is kept apart from it (what both need goes below them)")
            } else {
                None
            };
            if let Some(why) = why {
                finding.refused.push(format!(
                    "{shown} names crate::{}: {layer} {why}",
                    named.join("::")
                ));
            }
        }
    }
    finding.refused.sort();
    finding.refused.dedup();
    finding
}

/// The circles in a graph, each as the modules it runs through (Tarjan's components of
/// more than one module).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        if let Some(next) = s.graph.get(v) {
            for w in next {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let low = s.low[v].min(s.low[w]);
                    s.low.insert(v, low);
                } else if s.on_stack.contains(w) {
                    let low = s.low[v].min(s.index[w]);
                    s.low.insert(v, low);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found
}

#[test]
fn every_import_runs_down_the_layers_and_none_in_a_circle() {
    let finding = read_the_tree(&root().join("src"));
    assert!(
        finding.files_read > 100,
        "the source tree is read: {} files",
        finding.files_read
    );
    assert!(
        !finding.siblings.is_empty(),
        "imports between a layer's modules are seen"
    );
    let circles = circles(&finding.siblings);
    assert!(
        finding.refused.is_empty() && circles.is_empty(),
        "imports against the layers (src/lib.rs):\n{}\ncircles within a layer:\n{:#?}",
        finding.refused.join("\n"),
        circles
    );
}

#[test]
fn the_reader_sees_what_it_must_refuse() {
    let here = |p: &str| module_path(Path::new(p));
    let code = without_comments(
        "use crate::archive::Archive; // crate::web::nothing\n\
         /* crate::cli::nothing */ let x = super::super::structured::to_json(b);\n\
         let y = crate::message::body::text(z);",
    );
    let named = named_paths(&code, &here("message/body/inner.rs"));
    assert_eq!(
        named,
        [
            vec!["archive".to_string(), "Archive".into()],
            vec!["message".into(), "body".into()],
            vec!["message".into(), "structured".into()],
        ]
    );
    let mut graph = BTreeMap::new();
    graph.insert("m::a".to_string(), BTreeSet::from(["m::b".to_string()]));
    graph.insert("m::b".to_string(), BTreeSet::from(["m::a".to_string()]));
    graph.insert("m::c".to_string(), BTreeSet::from(["m::a".to_string()]));
    assert_eq!(circles(&graph), [vec!["m::a".to_string(), "m::b".into()]]);
}
