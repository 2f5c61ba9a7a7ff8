//! The house's walls, checked: the import graph of `src/` against the floors
//! that docs/architecture.md writes down (its `## Floors` table), so the map
//! and the code cannot disagree.
//!
//! Each file of `src/` is read as text (comments and literals blanked out,
//! `#[cfg(test)]` code left out). Every path it names is resolved to the file
//! that defines the item: `use` trees, inline `crate::…`, `super::…`,
//! `self::…` paths, paths through a child module or through a name a `use`
//! brought in, and re-exports followed (`pub use x::Y` in a `mod.rs` leads to
//! `x.rs`). Two rules then hold:
//!
//! * **floors**: a file uses other top-level modules only on floors below
//!   its own (a module's files may use each other);
//! * **no file-level cycle**: no file reaches itself through others.
//!
//! A violation names the file, the line and the path as written. The checker
//! works on text it is handed, so its own tests give it small made-up crates
//! with a violation and see it fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// One source file, relative to `src/`, e.g. `run/audit.rs`.
pub(crate) struct Source {
    pub rel: String,
    pub text: String,
}

/// A file's code with comments and literals blanked (newlines kept, so byte
/// offsets still give lines), and the parts under `#[cfg(test)]`.
struct File {
    rel: String,
    module: Vec<String>,
    code: String,
    /// Byte ranges of `#[cfg(test)]` items.
    test_ranges: Vec<(usize, usize)>,
    /// Child modules declared `#[cfg(test)] mod x;`.
    test_children: BTreeSet<String>,
    /// Inline modules (`mod x { … }`): byte range and name.
    inline_mods: Vec<(usize, usize, String)>,
    /// What each `use` brings in, globs under the name `*`.
    uses: Vec<Use>,
    /// Item names defined at the file's top level (fn, struct, enum, trait,
    /// type, const, static, union, mod, macro_rules!).
    defines: BTreeSet<String>,
    /// Item names defined anywhere in it, inline modules and impls too.
    defines_all: BTreeSet<String>,
    /// Every identifier of its code outside tests (what a glob import may
    /// bring in).
    words: BTreeSet<String>,
    is_test: bool,
}

#[derive(Clone, Debug)]
struct Use {
    path: Vec<String>,
    /// The name it is known by here; `*` for a glob.
    name: String,
    at: usize,
    line: usize,
    in_test: bool,
}

/// An arrow from one file to another, where it is first written.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Arrow {
    pub from: String,
    pub to: String,
    pub line: usize,
    pub written: String,
}

/// The import graph of a crate's `src/`.
pub(crate) struct Graph {
    files: Vec<File>,
    by_module: BTreeMap<Vec<String>, usize>,
    pub arrows: Vec<Arrow>,
}

/// The module path of a file: `run/audit.rs` → `run::audit`, `run/mod.rs` →
/// `run`, `lib.rs` → the root.
fn module_of(rel: &str) -> Vec<String> {
    let stem = rel.strip_suffix(".rs").unwrap_or(rel);
    let mut parts: Vec<String> = stem.split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The top-level module a file belongs to (`run/status/model.rs` → `run`).
pub(crate) fn top_of(rel: &str) -> String {
    module_of(rel).first().cloned().unwrap_or_default()
}

/// Blanks comments, string, byte-string, raw-string and char literals with
/// spaces, keeping newlines, so what is left is code at the same offsets.
fn blank(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let wipe = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in out.iter_mut().take(to).skip(from) {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        let c = b[i];
        let ident_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            let end = src[i..].find('\n').map_or(b.len(), |n| i + n);
            wipe(&mut out, i, end);
            i = end;
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            let mut j = i;
            while j < b.len() {
                if b[j] == b'/' && b.get(j + 1) == Some(&b'*') {
                    depth += 1;
                    j += 2;
                } else if b[j] == b'*' && b.get(j + 1) == Some(&b'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            wipe(&mut out, i, j);
            i = j;
        } else if !ident_before && (c == b'r' || (c == b'b' && b.get(i + 1) == Some(&b'r'))) && {
            let k = if c == b'b' { i + 2 } else { i + 1 };
            let mut k2 = k;
            while b.get(k2) == Some(&b'#') {
                k2 += 1;
            }
            b.get(k2) == Some(&b'"')
        } {
            let k = if c == b'b' { i + 2 } else { i + 1 };
            let mut hashes = 0;
            while b.get(k + hashes) == Some(&b'#') {
                hashes += 1;
            }
            let close: String = std::iter::once('"')
                .chain("#".repeat(hashes).chars())
                .collect();
            let body = k + hashes + 1;
            let end = src[body..]
                .find(&close)
                .map_or(b.len(), |n| body + n + close.len());
            wipe(&mut out, i, end);
            i = end;
        } else if c == b'"' || (c == b'b' && !ident_before && b.get(i + 1) == Some(&b'"')) {
            let mut j = if c == b'b' { i + 2 } else { i + 1 };
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(b.len());
            wipe(&mut out, i, end);
            i = end;
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}'), else a lifetime or label.
            if b.get(i + 1) == Some(&b'\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != b'\'' {
                    j += 1;
                }
                wipe(&mut out, i, j + 1);
                i = j + 1;
            } else if let Some(ch) = src[i + 1..].chars().next() {
                let after = i + 1 + ch.len_utf8();
                if b.get(after) == Some(&b'\'') {
                    wipe(&mut out, i, after + 1);
                    i = after + 1;
                } else {
                    i += 1;
                }
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    // Only ASCII bytes were replaced by ASCII spaces, but a wiped literal may
    // have held multi-byte characters: every byte of them became a space.
    String::from_utf8(out).expect("blanking keeps UTF-8")
}

fn is_ident_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The word starting at `i`, if one does.
fn word_at(code: &str, i: usize) -> &str {
    let b = code.as_bytes();
    let mut j = i;
    while j < b.len() && is_ident_byte(b[j]) {
        j += 1;
    }
    &code[i..j]
}

fn skip_space(code: &str, mut i: usize) -> usize {
    let b = code.as_bytes();
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// The end of the brace block opening at `open` (one past its `}`).
fn block_end(code: &str, open: usize) -> usize {
    let b = code.as_bytes();
    let mut depth = 0usize;
    for (j, &c) in b.iter().enumerate().skip(open) {
        if c == b'{' {
            depth += 1;
        } else if c == b'}' {
            depth -= 1;
            if depth == 0 {
                return j + 1;
            }
        }
    }
    b.len()
}

/// The `#[cfg(test)]` items of a file: their byte ranges, and the child
/// modules declared so (`#[cfg(test)] mod tests;`).
fn test_items(code: &str) -> (Vec<(usize, usize)>, BTreeSet<String>) {
    let mut ranges = Vec::new();
    let mut children = BTreeSet::new();
    let b = code.as_bytes();
    let mut from = 0;
    while let Some(n) = code[from..].find("#[cfg(test)]") {
        let start = from + n;
        let mut i = start + "#[cfg(test)]".len();
        // Further attributes.
        loop {
            i = skip_space(code, i);
            if b.get(i) == Some(&b'#') {
                i = code[i..].find(']').map_or(b.len(), |n| i + n + 1);
            } else {
                break;
            }
        }
        // `mod name;` declares a test file.
        let mut k = i;
        if word_at(code, k) == "pub" {
            k = skip_space(code, k + 3);
            if b.get(k) == Some(&b'(') {
                k = code[k..].find(')').map_or(b.len(), |n| k + n + 1);
            }
            k = skip_space(code, k);
        }
        if word_at(code, k) == "mod" {
            let name_at = skip_space(code, k + 3);
            let name = word_at(code, name_at);
            let after = skip_space(code, name_at + name.len());
            if b.get(after) == Some(&b';') {
                children.insert(name.to_string());
                ranges.push((start, after + 1));
                from = after + 1;
                continue;
            }
        }
        // Otherwise the item ends at its first `;` or its brace block.
        let semi = code[i..].find(';').map(|n| i + n);
        let brace = code[i..].find('{').map(|n| i + n);
        let end = match (semi, brace) {
            (Some(s), Some(o)) if s < o => s + 1,
            (_, Some(o)) => block_end(code, o),
            (Some(s), None) => s + 1,
            (None, None) => b.len(),
        };
        ranges.push((start, end));
        from = end.max(start + 1);
    }
    (ranges, children)
}

fn line_of(code: &str, at: usize) -> usize {
    code[..at].bytes().filter(|&c| c == b'\n').count() + 1
}

/// The offsets of a text's newlines, for `line_in`.
fn newlines(code: &str) -> Vec<usize> {
    code.bytes()
        .enumerate()
        .filter(|&(_, c)| c == b'\n')
        .map(|(i, _)| i)
        .collect()
}

/// The line of offset `at`, given the text's newlines.
fn line_in(newlines: &[usize], at: usize) -> usize {
    newlines.partition_point(|&n| n < at) + 1
}

/// Splits a use tree (`a::{b, c::{d as e}, f::*}`) into paths with the name
/// each is known by.
fn use_tree(tree: &str, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    // Top-level commas split sibling trees.
    let mut depth = 0;
    let mut parts = Vec::new();
    let mut last = 0;
    for (i, c) in tree.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&tree[last..i]);
                last = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&tree[last..]);
    if parts.len() > 1 {
        for p in parts {
            use_tree(p, prefix, out);
        }
        return;
    }
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim().trim_end_matches("::").trim();
        let close = tree.rfind('}').unwrap_or(tree.len());
        let mut p = prefix.to_vec();
        p.extend(
            head.split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
        );
        use_tree(&tree[open + 1..close], &p, out);
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p.trim(), Some(a.trim().to_string())),
        None => (tree, None),
    };
    let mut p = prefix.to_vec();
    p.extend(
        path.split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string),
    );
    if p.last().map(String::as_str) == Some("self") {
        p.pop();
    }
    let Some(last) = p.last().cloned() else {
        return;
    };
    let name = alias.unwrap_or(last);
    out.push((p, name));
}

/// Every `use` declaration of a file, with the `[start, end)` of each.
fn uses_of(code: &str, tests: &[(usize, usize)]) -> (Vec<Use>, Vec<(usize, usize)>) {
    let b = code.as_bytes();
    let mut uses = Vec::new();
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(n) = code[from..].find("use") {
        let at = from + n;
        from = at + 3;
        let before_ok = at == 0 || !is_ident_byte(b[at - 1]);
        let after_ok = b.get(at + 3).is_some_and(|c| c.is_ascii_whitespace());
        if !before_ok || !after_ok {
            continue;
        }
        let Some(semi) = code[at..].find(';').map(|n| at + n) else {
            break;
        };
        let tree: String = code[at + 3..semi]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let tree = tree.replace(":: ", "::").replace(" ::", "::");
        let mut paths = Vec::new();
        use_tree(&tree, &[], &mut paths);
        let line = line_of(code, at);
        let in_test = tests.iter().any(|&(s, e)| at >= s && at < e);
        for (path, name) in paths {
            uses.push(Use {
                path,
                name,
                at,
                line,
                in_test,
            });
        }
        spans.push((at, semi + 1));
        from = semi + 1;
    }
    (uses, spans)
}

/// The brace depth at each byte of `code`.
fn depths(code: &str) -> Vec<u16> {
    let mut depth = 0u16;
    code.bytes()
        .map(|c| {
            match c {
                b'{' => depth += 1,
                b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
            depth
        })
        .collect()
}

/// Offsets where a keyword stands as a word.
fn keyword_at(code: &str, kw: &str) -> Vec<usize> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(n) = code[from..].find(kw) {
        let at = from + n;
        from = at + kw.len();
        let before = at > 0 && is_ident_byte(b[at - 1]);
        let after = !kw.ends_with('!') && b.get(at + kw.len()).is_some_and(|&c| is_ident_byte(c));
        if !before && !after {
            found.push(at);
        }
    }
    found
}

/// Item names a file defines at its top level (outside inline modules), or
/// at any depth with `depth` `None`.
fn defines_of(code: &str, depth: Option<&[u16]>) -> BTreeSet<String> {
    const KEYWORDS: [&str; 10] = [
        "fn",
        "struct",
        "enum",
        "trait",
        "type",
        "const",
        "static",
        "union",
        "mod",
        "macro_rules!",
    ];
    let mut names = BTreeSet::new();
    for kw in KEYWORDS {
        for at in keyword_at(code, kw) {
            if depth.is_some_and(|d| d[at] != 0) {
                continue;
            }
            let name_at = skip_space(code, at + kw.len());
            let name = word_at(code, name_at);
            if !name.is_empty() {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// The inline modules of a file (`mod x { … }`), with their byte ranges.
fn inline_mods_of(code: &str) -> Vec<(usize, usize, String)> {
    let b = code.as_bytes();
    let mut mods = Vec::new();
    for at in keyword_at(code, "mod") {
        let name_at = skip_space(code, at + 3);
        let name = word_at(code, name_at);
        let open = skip_space(code, name_at + name.len());
        if !name.is_empty() && b.get(open) == Some(&b'{') {
            mods.push((open, block_end(code, open), name.to_string()));
        }
    }
    mods
}

/// Paths written in code: runs of identifiers joined by `::`, two or more
/// long, each with its offset.
fn inline_paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if is_ident_byte(b[i]) && (i == 0 || !(is_ident_byte(b[i - 1]) || b[i - 1] == b':')) {
            let start = i;
            let mut segs = Vec::new();
            let mut j = i;
            loop {
                let w = word_at(code, j);
                if w.is_empty() {
                    break;
                }
                segs.push(w.to_string());
                j += w.len();
                if code[j..].starts_with("::") && b.get(j + 2).is_some_and(|&c| is_ident_byte(c)) {
                    j += 2;
                } else {
                    break;
                }
            }
            if segs.len() >= 2 {
                out.push((start, segs));
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// The identifiers of `code` outside the given ranges.
fn words_of(code: &str, skip: &[(usize, usize)]) -> BTreeSet<String> {
    let b = code.as_bytes();
    let mut words = BTreeSet::new();
    let mut i = 0;
    while i < b.len() {
        if (b[i].is_ascii_alphabetic() || b[i] == b'_') && (i == 0 || !is_ident_byte(b[i - 1])) {
            let w = word_at(code, i);
            if !skip.iter().any(|&(s, e)| i >= s && i < e) {
                words.insert(w.to_string());
            }
            i += w.len();
        } else {
            i += 1;
        }
    }
    words
}

/// How many `use` or glob steps a name is followed through.
const DEPTH: usize = 8;

impl Graph {
    /// Reads `src_dir` (every `.rs` file below it except the binaries'
    /// `main.rs` and `bin/`, which use the library from outside).
    pub(crate) fn read(src_dir: &Path) -> Graph {
        let mut sources = Vec::new();
        let mut dirs = vec![src_dir.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            let entries =
                std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            for entry in entries {
                let path = entry.expect("a directory entry").path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let rel = path
                        .strip_prefix(src_dir)
                        .expect("below src")
                        .to_string_lossy()
                        .into_owned();
                    if rel == "main.rs" || rel.starts_with("bin/") {
                        continue;
                    }
                    let text =
                        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
                    sources.push(Source { rel, text });
                }
            }
        }
        Graph::from_sources(sources)
    }

    /// The graph of the given files (paths relative to `src/`).
    pub(crate) fn from_sources(mut sources: Vec<Source>) -> Graph {
        sources.sort_by(|a, b| a.rel.cmp(&b.rel));
        let mut files = Vec::new();
        for s in sources {
            let code = blank(&s.text);
            let (test_ranges, test_children) = test_items(&code);
            let (uses, _) = uses_of(&code, &test_ranges);
            let depth = depths(&code);
            files.push(File {
                module: module_of(&s.rel),
                defines: defines_of(&code, Some(&depth)),
                defines_all: defines_of(&code, None),
                inline_mods: inline_mods_of(&code),
                words: words_of(&code, &test_ranges),
                rel: s.rel,
                code,
                test_ranges,
                test_children,
                uses,
                is_test: false,
            });
        }
        let by_module: BTreeMap<Vec<String>, usize> = files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.module.clone(), i))
            .collect();
        // A file is test code when its module, or one above it, is declared
        // `#[cfg(test)] mod x;`.
        let test_flags: Vec<bool> = files
            .iter()
            .map(|f| {
                (1..=f.module.len()).any(|n| {
                    let parent = &f.module[..n - 1];
                    by_module
                        .get(parent)
                        .is_some_and(|&p| files[p].test_children.contains(&f.module[n - 1]))
                })
            })
            .collect();
        for (f, t) in files.iter_mut().zip(test_flags) {
            f.is_test = t;
        }
        let mut graph = Graph {
            files,
            by_module,
            arrows: Vec::new(),
        };
        graph.arrows = graph.collect_arrows();
        graph
    }

    /// The module the code at offset `at` of file `f` is in: the file's,
    /// and the inline modules around `at`.
    fn module_at(&self, f: usize, at: usize) -> Vec<String> {
        let file = &self.files[f];
        let mut module = file.module.clone();
        let mut inner: Vec<&(usize, usize, String)> = file
            .inline_mods
            .iter()
            .filter(|&&(s, e, _)| at > s && at < e)
            .collect();
        inner.sort_by_key(|m| m.0);
        module.extend(inner.into_iter().map(|m| m.2.clone()));
        module
    }

    /// A path written at offset `at` of file `f`, made absolute (from the
    /// crate root), or `None` for a path outside the crate (std, a
    /// dependency, a local type's associated item).
    fn absolute(&self, f: usize, at: usize, path: &[String], depth: usize) -> Option<Vec<String>> {
        let file = &self.files[f];
        let first = path.first()?;
        match first.as_str() {
            "crate" => Some(path[1..].to_vec()),
            "super" | "self" => {
                let mut base = self.module_at(f, at);
                let mut rest = path;
                while let Some(s) = rest.first() {
                    match s.as_str() {
                        "super" => {
                            base.pop();
                        }
                        "self" => {}
                        _ => break,
                    }
                    rest = &rest[1..];
                }
                base.extend(rest.iter().cloned());
                Some(base)
            }
            _ if depth == 0 => None,
            _ => {
                // A child module of this one (a file, or inline).
                let mut child = self.module_at(f, at);
                child.push(first.clone());
                if self.by_module.contains_key(&child)
                    || file.inline_mods.iter().any(|m| &m.2 == first)
                {
                    child.extend(path[1..].iter().cloned());
                    return Some(child);
                }
                // A name a `use` of this file brought in.
                let u = file
                    .uses
                    .iter()
                    .find(|u| &u.name == first && !u.in_test && u.path.first() != Some(first))?;
                let mut base = self.absolute(f, u.at, &u.path, depth - 1)?;
                base.extend(path[1..].iter().cloned());
                Some(base)
            }
        }
    }

    /// The file that defines what an absolute path names: the deepest
    /// module file on it, then through that file's `use`s (re-exports, and
    /// the imports its children reach with `super::`).
    fn locate(&self, path: &[String], depth: usize) -> Option<usize> {
        let (n, &f) = (0..=path.len())
            .rev()
            .find_map(|n| self.by_module.get(&path[..n]).map(|f| (n, f)))?;
        let rest = &path[n..];
        let Some(name) = rest.first() else {
            return Some(f);
        };
        Some(self.name_in(f, name, &rest[1..], depth).unwrap_or(f))
    }

    /// Where the name `name` of module file `f` (then `rest`) is defined:
    /// `f` itself, or where a `use` or glob of `f` leads; `None` when `f`
    /// does not know the name.
    fn name_in(&self, f: usize, name: &str, rest: &[String], depth: usize) -> Option<usize> {
        let file = &self.files[f];
        if file.defines.contains(name) {
            return Some(f);
        }
        if depth == 0 {
            return None;
        }
        if let Some(u) = file.uses.iter().find(|u| u.name == name && !u.in_test) {
            let mut abs = self.absolute(f, u.at, &u.path, depth - 1)?;
            abs.extend(rest.iter().cloned());
            return self.locate(&abs, depth - 1);
        }
        file.uses
            .iter()
            .filter(|u| u.name == "*" && !u.in_test)
            .find_map(|u| {
                let abs = self.absolute(f, u.at, &u.path[..u.path.len() - 1], depth - 1)?;
                let &g = self.by_module.get(&abs)?;
                if g == f {
                    return None;
                }
                self.name_in(g, name, rest, depth - 1)
            })
    }

    fn collect_arrows(&self) -> Vec<Arrow> {
        let mut arrows: BTreeMap<(usize, usize), Arrow> = BTreeMap::new();
        for (f, file) in self.files.iter().enumerate() {
            if file.is_test {
                continue;
            }
            let in_test = |at: usize| file.test_ranges.iter().any(|&(s, e)| at >= s && at < e);
            let (_, use_spans) = uses_of(&file.code, &file.test_ranges);
            // (line, path as written, the file it leads to)
            let mut found: Vec<(usize, String, usize)> = Vec::new();
            for u in file.uses.iter().filter(|u| !u.in_test) {
                if u.name == "*" {
                    // A glob: an arrow for each name of this file it brings in.
                    let glob = &u.path[..u.path.len() - 1];
                    let Some(abs) = self.absolute(f, u.at, glob, DEPTH) else {
                        continue;
                    };
                    let Some(&g) = self.by_module.get(&abs) else {
                        continue;
                    };
                    for w in file.words.iter().filter(|w| !file.defines.contains(*w)) {
                        if let Some(to) = self.name_in(g, w, &[], DEPTH) {
                            found.push((u.line, format!("{}::{w}", glob.join("::")), to));
                        }
                    }
                    continue;
                }
                let Some(abs) = self.absolute(f, u.at, &u.path, DEPTH) else {
                    continue;
                };
                // A module brought in by name is no arrow yet; the paths
                // through it are.
                if self.by_module.contains_key(&abs) {
                    continue;
                }
                if let Some(to) = self.locate(&abs, DEPTH) {
                    found.push((u.line, u.path.join("::"), to));
                }
            }
            let lines = newlines(&file.code);
            for (at, path) in inline_paths(&file.code) {
                if in_test(at) || use_spans.iter().any(|&(s, e)| at >= s && at < e) {
                    continue;
                }
                let Some(abs) = self.absolute(f, at, &path, DEPTH) else {
                    continue;
                };
                if let Some(to) = self.locate(&abs, DEPTH) {
                    found.push((line_in(&lines, at), path.join("::"), to));
                }
            }
            for (line, written, to) in found {
                if to == f || self.files[to].is_test {
                    continue;
                }
                let arrow = Arrow {
                    from: file.rel.clone(),
                    to: self.files[to].rel.clone(),
                    line,
                    written,
                };
                arrows
                    .entry((f, to))
                    .and_modify(|a| {
                        if line < a.line {
                            *a = arrow.clone();
                        }
                    })
                    .or_insert(arrow);
            }
        }
        arrows.into_values().collect()
    }

    /// The file-level cycles: each strongly connected set of two or more
    /// files, with the arrows inside it.
    pub(crate) fn cycles(&self) -> Vec<Vec<Arrow>> {
        let n = self.files.len();
        let index: BTreeMap<&str, usize> = self
            .files
            .iter()
            .enumerate()
            .map(|(i, f)| (f.rel.as_str(), i))
            .collect();
        let mut next: Vec<Vec<usize>> = vec![Vec::new(); n];
        for a in &self.arrows {
            next[index[a.from.as_str()]].push(index[a.to.as_str()]);
        }
        // Tarjan's algorithm, iteratively.
        let mut order = vec![usize::MAX; n];
        let mut low = vec![0; n];
        let mut on_stack = vec![false; n];
        let mut stack = Vec::new();
        let mut counter = 0;
        let mut sets = Vec::new();
        for root in 0..n {
            if order[root] != usize::MAX {
                continue;
            }
            let mut work = vec![(root, 0usize)];
            while let Some(&mut (v, ref mut k)) = work.last_mut() {
                if *k == 0 && order[v] == usize::MAX {
                    order[v] = counter;
                    low[v] = counter;
                    counter += 1;
                    stack.push(v);
                    on_stack[v] = true;
                }
                if *k < next[v].len() {
                    let w = next[v][*k];
                    *k += 1;
                    if order[w] == usize::MAX {
                        work.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(order[w]);
                    }
                } else {
                    work.pop();
                    if let Some(&(u, _)) = work.last() {
                        low[u] = low[u].min(low[v]);
                    }
                    if low[v] == order[v] {
                        let mut set = BTreeSet::new();
                        while let Some(w) = stack.pop() {
                            on_stack[w] = false;
                            set.insert(w);
                            if w == v {
                                break;
                            }
                        }
                        if set.len() > 1 {
                            sets.push(set);
                        }
                    }
                }
            }
        }
        sets.into_iter()
            .map(|set| {
                self.arrows
                    .iter()
                    .filter(|a| {
                        set.contains(&index[a.from.as_str()]) && set.contains(&index[a.to.as_str()])
                    })
                    .cloned()
                    .collect()
            })
            .collect()
    }

    /// The top-level modules of the crate (`run`, `fsutil`, …).
    pub(crate) fn top_modules(&self) -> BTreeSet<String> {
        self.files
            .iter()
            .filter(|f| !f.is_test)
            .map(|f| top_of(&f.rel))
            .filter(|m| !m.is_empty())
            .collect()
    }

    /// Arrows between top-level modules that do not point to a lower floor.
    pub(crate) fn against_floors(&self, floors: &BTreeMap<String, usize>) -> Vec<String> {
        let mut found = Vec::new();
        for a in &self.arrows {
            let (from, to) = (top_of(&a.from), top_of(&a.to));
            if from == to || from.is_empty() || to.is_empty() {
                continue;
            }
            let (Some(&up), Some(&down)) = (floors.get(&from), floors.get(&to)) else {
                continue;
            };
            if down >= up {
                found.push(format!(
                    "src/{}:{}: `{}` leads to src/{} (`{to}` is on floor {down}, `{from}` on floor {up}: a module uses only lower floors)",
                    a.from, a.line, a.written, a.to
                ));
            }
        }
        found
    }
}

impl Graph {
    /// Whether a path a document names exists: from the crate root or from
    /// any module (the map's rows name paths relative to their module), a
    /// module path, then an item the module's file knows (`name_in`), or one
    /// defined anywhere in it (an inline module's, a test's); a path that
    /// starts with a type (`Printer::new`) needs the type defined somewhere,
    /// or brought in from a dependency by a `use` (`PutMode::Create`). What
    /// follows the item (a method, a variant, a field) must be a name the
    /// code uses or defines.
    fn names_exist(&self, path: &[String], names: &BTreeSet<&str>) -> bool {
        let used = |w: &String| names.contains(w.as_str());
        let mut bases: Vec<&Vec<String>> = self.by_module.keys().collect();
        bases.sort();
        for base in bases {
            let mut full = base.clone();
            full.extend(path.iter().cloned());
            let Some(n) = (base.len() + 1..=full.len())
                .rev()
                .find(|&n| self.by_module.contains_key(&full[..n]))
            else {
                continue;
            };
            let f = self.by_module[&full[..n]];
            let rest = &full[n..];
            let Some(item) = rest.first() else {
                return true;
            };
            let known = self.name_in(f, item, &[], DEPTH).is_some()
                || self.files[f].defines_all.contains(item);
            if known && rest[1..].iter().all(used) {
                return true;
            }
        }
        let Some(first) = path.first() else {
            return false;
        };
        let outside = |u: &Use| {
            !matches!(
                u.path.first().map(String::as_str),
                Some("crate" | "super" | "self")
            )
        };
        let known = self.files.iter().any(|f| {
            f.defines_all.contains(first) || f.uses.iter().any(|u| &u.name == first && outside(u))
        });
        known && path[1..].iter().all(used)
    }
}

/// The longest a function outside tests may be, in lines (signature to
/// closing brace): a longer one is a list of sections, phases or checks
/// that want a name each.
pub(crate) const MAX_FUNCTION_LINES: usize = 150;

impl Graph {
    /// Functions outside `#[cfg(test)]` code and test files longer than
    /// `max` lines, as `file:line name (N lines)`, by file and line.
    pub(crate) fn long_functions(&self, max: usize) -> Vec<String> {
        let mut found = Vec::new();
        for f in self.files.iter().filter(|f| !f.is_test) {
            let b = f.code.as_bytes();
            let lines = newlines(&f.code);
            for at in keyword_at(&f.code, "fn") {
                if f.test_ranges.iter().any(|&(s, e)| s <= at && at < e) {
                    continue;
                }
                // `fn name`, not a `fn(..)` pointer type.
                let name_at = skip_space(&f.code, at + 2);
                let name = word_at(&f.code, name_at);
                if name.is_empty() {
                    continue;
                }
                // The body opens at the first `{` after the signature; a `;`
                // first is a declaration without one.
                let Some(open) = f.code[name_at..]
                    .find(['{', ';'])
                    .map(|n| name_at + n)
                    .filter(|&o| b[o] == b'{')
                else {
                    continue;
                };
                let end = block_end(&f.code, open);
                let (first, last) = (line_in(&lines, at), line_in(&lines, end - 1));
                let n = last - first + 1;
                if n > max {
                    found.push(format!("{}:{first} {name} ({n} lines)", f.rel));
                }
            }
        }
        found
    }
}

/// The `path::item` identifiers a document names in code spans (`a::b`,
/// `a::{b, c::d}`, a call's `()` dropped) that the code does not have, one
/// line each with the document's line.
pub(crate) fn unknown_names(doc: &str, graph: &Graph) -> Vec<String> {
    // Every name the code uses or defines, once.
    let names: BTreeSet<&str> = graph
        .files
        .iter()
        .flat_map(|f| f.words.iter().chain(&f.defines_all))
        .map(String::as_str)
        .collect();
    let mut found = Vec::new();
    for (n, line) in doc.lines().enumerate() {
        for span in line.split('`').skip(1).step_by(2) {
            let span = span.trim_end_matches("()");
            let plain = |c: char| {
                c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '{' | '}' | ',' | ' ')
            };
            if !span.contains("::") || !span.chars().all(plain) || span.starts_with("::") {
                continue;
            }
            let mut paths = Vec::new();
            use_tree(&span.replace(":: ", "::"), &[], &mut paths);
            for (path, _) in paths {
                let path: Vec<String> = path.into_iter().filter(|s| s != "crate").collect();
                if path.len() < 2 || path.iter().any(|s| s.is_empty() || s.contains(' ')) {
                    continue;
                }
                if !graph.names_exist(&path, &names) {
                    found.push(format!(
                        "docs/architecture.md:{}: `{span}` names `{}`, which src/ does not have",
                        n + 1,
                        path.join("::")
                    ));
                }
            }
        }
    }
    found
}

/// The floors of docs/architecture.md: the table under its `## Floors`
/// heading, one row per floor (`| N | `a`, `b` |`), each module named once.
pub(crate) fn parse_floors(doc: &str) -> Result<BTreeMap<String, usize>, String> {
    let start = doc
        .find("\n## Floors\n")
        .ok_or("docs/architecture.md has no `## Floors` section")?;
    let body = &doc[start + 1..];
    let body = &body[..body[3..].find("\n## ").map_or(body.len(), |n| n + 4)];
    let mut floors = BTreeMap::new();
    for row in body.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let Some(Ok(floor)) = cells.first().map(|c| c.parse::<usize>()) else {
            continue;
        };
        let names = cells
            .get(1)
            .ok_or_else(|| format!("floor {floor}: no modules"))?;
        for name in names.split('`').skip(1).step_by(2) {
            if floors.insert(name.to_string(), floor).is_some() {
                return Err(format!("`{name}` is on two floors"));
            }
        }
    }
    if floors.is_empty() {
        return Err("the `## Floors` section has no rows `| N | `module`, … |`".into());
    }
    Ok(floors)
}

/// Every violation of the house's rules in `graph`, one line each.
pub(crate) fn violations(graph: &Graph, floors: &BTreeMap<String, usize>) -> Vec<String> {
    let mut found = Vec::new();
    for m in graph.top_modules() {
        if !floors.contains_key(&m) {
            found.push(format!(
                "src/{m}: the module is on no floor of docs/architecture.md"
            ));
        }
    }
    for m in floors.keys() {
        if !graph.top_modules().contains(m) {
            found.push(format!(
                "docs/architecture.md: floor names `{m}`, which is no module of src/"
            ));
        }
    }
    found.extend(graph.against_floors(floors));
    for cycle in graph.cycles() {
        let mut text = String::from("a file-level cycle:");
        for a in cycle {
            text.push_str(&format!(
                "\n    src/{}:{}: `{}` leads to src/{}",
                a.from, a.line, a.written, a.to
            ));
        }
        found.push(text);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_of(files: &[(&str, &str)]) -> Graph {
        Graph::from_sources(
            files
                .iter()
                .map(|(rel, text)| Source {
                    rel: rel.to_string(),
                    text: text.to_string(),
                })
                .collect(),
        )
    }

    fn floors(rows: &[(&str, usize)]) -> BTreeMap<String, usize> {
        rows.iter().map(|(m, f)| (m.to_string(), *f)).collect()
    }

    #[test]
    fn the_house_keeps_its_floors_and_has_no_cycle() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let doc = std::fs::read_to_string(root.join("docs/architecture.md"))
            .expect("docs/architecture.md");
        let floors = parse_floors(&doc).unwrap_or_else(|e| panic!("{e}"));
        let graph = Graph::read(&root.join("src"));
        assert!(
            graph.arrows.len() > 500,
            "the reader found only {} arrows",
            graph.arrows.len()
        );
        let found = violations(&graph, &floors);
        assert!(
            found.is_empty(),
            "{} against the house's rules:\n{}",
            found.len(),
            found.join("\n")
        );
    }

    /// Functions still over the limit, to be split (issue 35, item 6). The
    /// test fails when one of them is short again, so the list only shrinks;
    /// it is empty: every function outside tests is within the limit.
    const STILL_LONG: &[&str] = &[];

    #[test]
    fn no_function_outside_tests_is_a_list_longer_than_the_limit() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let graph = Graph::read(&root.join("src"));
        let long = graph.long_functions(MAX_FUNCTION_LINES);
        // An entry `file name` names the line `file:N name (M lines)`.
        let named = |l: &String, s: &str| {
            let (file, name) = s.split_once(' ').expect("`file name`");
            l.starts_with(&format!("{file}:")) && l.contains(&format!(" {name} ("))
        };
        let new: Vec<&String> = long
            .iter()
            .filter(|l| !STILL_LONG.iter().any(|s| named(l, s)))
            .collect();
        assert!(
            new.is_empty(),
            "functions over {MAX_FUNCTION_LINES} lines; split each into one function per \
             section, phase or check:\n{}",
            new.iter()
                .map(|l| l.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
        let short: Vec<&&str> = STILL_LONG
            .iter()
            .filter(|s| !long.iter().any(|l| named(l, s)))
            .collect();
        assert!(
            short.is_empty(),
            "no longer over the limit; take them off STILL_LONG: {short:?}"
        );
    }

    #[test]
    fn long_functions_are_counted_from_signature_to_brace_outside_tests() {
        let body = |n: usize| "    let _ = 1;\n".repeat(n);
        let text = format!(
            "pub fn long(f: fn(u8) -> u8) {{\n{}}}\n\
             fn short() {{\n{}}}\n\
             trait T {{ fn declared(&self); }}\n\
             #[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{}    }}\n}}\n",
            body(9),
            body(8),
            body(20)
        );
        let graph = crate_of(&[("a.rs", &text), ("lib.rs", "mod a;")]);
        // `long` is 11 lines, `short` 10.
        assert_eq!(graph.long_functions(10), ["a.rs:1 long (11 lines)"]);
        assert_eq!(graph.long_functions(11), Vec::<String>::new());
        assert_eq!(graph.long_functions(9).len(), 2);
    }

    #[test]
    fn every_path_the_map_names_exists() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let doc = std::fs::read_to_string(root.join("docs/architecture.md"))
            .expect("docs/architecture.md");
        let graph = Graph::read(&root.join("src"));
        let unknown = unknown_names(&doc, &graph);
        assert!(
            unknown.is_empty(),
            "{} names the map has and the code has not:\n{}",
            unknown.len(),
            unknown.join("\n")
        );
    }

    #[test]
    fn a_name_the_code_does_not_have_is_found() {
        let g = crate_of(&[
            ("lib.rs", "mod run;\nmod printer;\n"),
            ("run/mod.rs", "pub mod team;\n"),
            (
                "run/team.rs",
                "pub fn locate() {}\npub struct Located;\nmod inner { pub struct Deep; }\n",
            ),
            (
                "printer.rs",
                "pub struct Printer;\nimpl Printer { pub fn new() -> Printer { Printer } }\n",
            ),
        ]);
        let doc = "a `run::team::{locate, Located}`, `team::locate()`, `Printer::new`, `run::team::Deep`\n\n`run::team::holds_allocation`, `Printer::capture`, `run::query::find_run`, `1 + 1`, `crate::…`\n";
        assert_eq!(
            unknown_names(doc, &g),
            [
                "docs/architecture.md:3: `run::team::holds_allocation` names `run::team::holds_allocation`, which src/ does not have",
                "docs/architecture.md:3: `Printer::capture` names `Printer::capture`, which src/ does not have",
                "docs/architecture.md:3: `run::query::find_run` names `run::query::find_run`, which src/ does not have",
            ]
        );
    }

    #[test]
    fn an_upward_arrow_is_named_with_its_file_and_line() {
        let g = crate_of(&[
            ("lib.rs", "mod low;\nmod high;\n"),
            ("low/mod.rs", "pub mod a;\n"),
            ("low/a.rs", "// a comment: crate::high::x\nfn f() {\n    let s = \"crate::high::x\";\n    crate::high::b::go();\n}\n"),
            ("high/mod.rs", "pub mod b;\n"),
            ("high/b.rs", "use crate::low::a::f;\npub fn go() {}\n"),
        ]);
        let found = g.against_floors(&floors(&[("low", 0), ("high", 1)]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("src/low/a.rs:4: `crate::high::b::go` leads to src/high/b.rs"),
            "{}",
            found[0]
        );
        // Same floor, two modules: refused too.
        assert_eq!(
            g.against_floors(&floors(&[("low", 1), ("high", 1)])).len(),
            2
        );
    }

    #[test]
    fn a_cycle_through_a_re_export_is_found_and_test_code_is_not_counted() {
        let g = crate_of(&[
            ("lib.rs", "mod cli;\n"),
            ("cli/mod.rs", "mod command;\nmod context;\nmod submit;\npub(crate) use command::{Command, GlobalArgs};\npub(crate) use context::Context;\n"),
            ("cli/command.rs", "pub enum Command { Submit(super::submit::Args) }\npub struct GlobalArgs;\n"),
            ("cli/context.rs", "use super::GlobalArgs;\npub struct Context(GlobalArgs);\n"),
            (
                "cli/submit.rs",
                "use super::Context;\npub struct Args;\n#[cfg(test)]\nmod tests {\n    use crate::cli::command::Command;\n}\n",
            ),
        ]);
        let cycles = g.cycles();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        let lines: Vec<String> = cycles[0]
            .iter()
            .map(|a| format!("{}:{}>{}", a.from, a.line, a.to))
            .collect();
        assert_eq!(
            lines,
            [
                "cli/command.rs:1>cli/submit.rs",
                "cli/context.rs:1>cli/command.rs",
                "cli/submit.rs:1>cli/context.rs"
            ]
        );
        // GlobalArgs in a file of its own: no cycle.
        let g = crate_of(&[
            ("lib.rs", "mod cli;\n"),
            ("cli/mod.rs", "mod command;\nmod context;\nmod global;\nmod submit;\npub(crate) use command::Command;\npub(crate) use global::GlobalArgs;\npub(crate) use context::Context;\n"),
            ("cli/command.rs", "pub enum Command { Submit(super::submit::Args) }\n"),
            ("cli/global.rs", "pub struct GlobalArgs;\n"),
            ("cli/context.rs", "use super::GlobalArgs;\npub struct Context(GlobalArgs);\n"),
            ("cli/submit.rs", "use super::Context;\npub struct Args;\n"),
        ]);
        assert!(g.cycles().is_empty(), "{:?}", g.cycles());
    }

    #[test]
    fn paths_through_an_imported_module_reach_the_defining_file() {
        let g = crate_of(&[
            ("lib.rs", "mod slurm;\nmod plan;\n"),
            ("slurm/mod.rs", "pub mod time;\npub use time::parse as parse_time;\n"),
            ("slurm/time.rs", "pub fn parse() {}\n"),
            ("plan/mod.rs", "use crate::slurm;\nfn f() { slurm::time::parse(); }\nfn g() { crate::slurm::parse_time(); }\n"),
        ]);
        let arrows: Vec<String> = g
            .arrows
            .iter()
            .map(|a| format!("{}:{}>{}", a.from, a.line, a.to))
            .collect();
        assert_eq!(
            arrows,
            [
                "plan/mod.rs:2>slurm/time.rs",
                "slurm/mod.rs:2>slurm/time.rs"
            ]
        );
    }

    #[test]
    fn floors_are_read_from_the_table_and_a_module_on_two_floors_is_refused() {
        let doc = "# A\n\n## Floors\n\n| Floor | Modules |\n|---|---|\n| 1 | `run`, `cli` |\n| 0 | `text` |\n\n## Next\n| 5 | `x` |\n";
        assert_eq!(
            parse_floors(doc).unwrap(),
            floors(&[("run", 1), ("cli", 1), ("text", 0)])
        );
        assert!(parse_floors("# A\n").is_err());
        assert!(parse_floors("\n## Floors\n| 1 | `a` |\n| 0 | `a` |\n")
            .unwrap_err()
            .contains("two floors"));
    }

    #[test]
    fn literals_and_comments_are_blanked_and_lines_kept() {
        let code = blank("let a = 'x'; let b = '\\''; /* crate::a\n */ let c = r#\"crate::b\"#; fn f<'a>() {}\n// crate::c\n");
        assert!(!code.contains("crate::"), "{code}");
        assert_eq!(code.lines().count(), 3);
        assert!(code.contains("fn f<'a>()"));
    }
}
