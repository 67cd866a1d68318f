//! Stack traces as the runtimes print them (pure): Java (with `Caused by:` chains), .NET
//! (with `--->` inner exceptions), Python tracebacks (chained), Node.js (with `[cause]`),
//! Go panics and Ruby. Each gives the exception that names the bug — the root of a chain, not
//! the wrapper a framework added — its message, and the top frame of the application's own
//! code (library and runtime frames skipped).

/// The runtime a trace came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Java,
    DotNet,
    Python,
    Node,
    Go,
    Ruby,
    Php,
}

impl Runtime {
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Java => "java",
            Runtime::DotNet => "dotnet",
            Runtime::Python => "python",
            Runtime::Node => "node",
            Runtime::Go => "go",
            Runtime::Ruby => "ruby",
            Runtime::Php => "php",
        }
    }
}

/// What a trace says of the failure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Root {
    pub error_type: Option<String>,
    pub message: String,
    /// The top frame of the application's own code, as printed (trimmed).
    pub frame: Option<String>,
}

/// Lines of a trace read at most: the root cause and its frames are within them.
const MAX_LINES: usize = 2_000;

/// The runtime whose trace `text` is, and its root cause; `None` for text that is no trace.
pub fn parse(text: &str) -> Option<(Runtime, Root)> {
    let lines: Vec<&str> = text.lines().take(MAX_LINES).collect();
    if lines.iter().any(|l| {
        l.trim_start()
            .starts_with("Traceback (most recent call last)")
    }) {
        return Some((Runtime::Python, python(&lines)));
    }
    if lines.iter().any(|l| l.starts_with("goroutine "))
        && lines.iter().any(|l| l.starts_with("panic: "))
    {
        return Some((Runtime::Go, go(&lines)));
    }
    if lines.iter().any(|l| l.trim() == "Stack trace:")
        && lines.iter().any(|l| php_frame(l).is_some())
    {
        return Some((Runtime::Php, php(&lines)));
    }
    if lines.first().is_some_and(|l| ruby_head(l).is_some()) {
        return Some((Runtime::Ruby, ruby(&lines)));
    }
    let frames = lines.iter().filter(|l| frame_of(l).is_some()).count();
    if frames == 0 {
        return None;
    }
    if lines.iter().any(|l| dotnet_frame(l).is_some()) || lines.iter().any(|l| l.contains(" ---> "))
    {
        return Some((Runtime::DotNet, dotnet(&lines)));
    }
    if lines.iter().any(|l| java_frame(l).is_some()) {
        return Some((Runtime::Java, java(&lines)));
    }
    Some((Runtime::Node, node(&lines)))
}

/// The text after `at ` of a frame line, of any of the `at` runtimes.
fn frame_of(line: &str) -> Option<&str> {
    line.trim_start()
        .strip_prefix("at ")
        .filter(|f| !f.is_empty())
}

/// A Java frame: `at pkg.Class.method(File.java:12)` (also `Native Method`, modules): no
/// space before the parenthesis, where Node's `at fn (/app/x.js:1:2)` has one.
fn java_frame(line: &str) -> Option<&str> {
    let frame = frame_of(line)?;
    let (method, _) = frame.split_once('(')?;
    (frame.ends_with(')') && !method.is_empty() && !method.contains(' ')).then_some(frame)
}

/// A .NET frame: `at Ns.Type.Method(Args) in /path/File.cs:line 42`, or without a file.
fn dotnet_frame(line: &str) -> Option<&str> {
    let frame = frame_of(line)?;
    (frame.contains(" in ") && frame.contains(":line ")).then_some(frame)
}

/// Whether a frame is a library's or the runtime's, not the application's.
fn library(frame: &str) -> bool {
    const PREFIXES: [&str; 26] = [
        "java.",
        "javax.",
        "jdk.",
        "sun.",
        "com.sun.",
        "kotlin.",
        "kotlinx.",
        "scala.",
        "org.springframework.",
        "org.apache.",
        "io.netty.",
        "reactor.",
        "com.rabbitmq.",
        "io.micrometer.",
        "System.",
        "Microsoft.",
        "MassTransit.",
        "NServiceBus.",
        "GreenPipes.",
        "RabbitMQ.Client.",
        "runtime.",
        "testing.",
        "net/http.",
        "reflect.",
        "sync.",
        "async ",
    ];
    const PARTS: [&str; 14] = [
        "site-packages/",
        "dist-packages/",
        "/lib/python",
        "<frozen ",
        "node_modules/",
        "node:internal",
        "(internal/",
        "/gems/",
        "/lib/ruby/",
        "<internal:",
        "/usr/local/go/src/",
        "/usr/lib/go",
        "/vendor/",
        "[internal function]",
    ];
    let frame = frame.trim_start_matches("async ");
    PREFIXES.iter().any(|p| frame.starts_with(p)) || PARTS.iter().any(|p| frame.contains(p))
}

/// The first application frame of `frames`.
fn first_app<'a>(frames: impl IntoIterator<Item = &'a str>) -> Option<String> {
    frames
        .into_iter()
        .find(|f| !library(f))
        .map(|f| f.trim().to_owned())
}

/// `Type: message` when the text before the colon is an exception type.
pub fn split_type(line: &str) -> (Option<String>, String) {
    let line = line.trim();
    if let Some((head, rest)) = line.split_once(':') {
        if is_type(head) && (rest.is_empty() || rest.starts_with(' ')) {
            return (Some(head.to_owned()), rest.trim().to_owned());
        }
    }
    if is_type(line) && named_like_error(line) {
        return (Some(line.to_owned()), String::new());
    }
    (None, line.to_owned())
}

/// Whether a word is an exception type's name: an identifier, maybe qualified (`a.b.C`,
/// `A::B`, PHP's `A\B`, generic .NET names), that reads like one.
pub fn is_type(word: &str) -> bool {
    let mut chars = word.chars();
    let starts = chars.next().is_some_and(|c| c.is_alphabetic() || c == '_');
    starts
        && word.len() <= 200
        && word
            .chars()
            .all(|c| c.is_alphanumeric() || "._$:`+<>[],\\".contains(c))
        && (word.contains('.')
            || word.contains('\\')
            || word.contains("::")
            || named_like_error(word)
            || word.chars().filter(|c| c.is_uppercase()).count() >= 2
                && word.chars().any(char::is_lowercase)
                && word.starts_with(|c: char| c.is_uppercase()))
}

fn named_like_error(word: &str) -> bool {
    const ENDINGS: [&str; 9] = [
        "Exception",
        "Error",
        "Fault",
        "Failure",
        "Panic",
        "Timeout",
        "Exit",
        "Interrupt",
        "Rejected",
    ];
    ENDINGS.iter().any(|e| word.ends_with(e))
}

/// The type and message of a header line, `Exception in thread "main" ` dropped.
fn head(line: &str) -> (Option<String>, String) {
    let line = line.trim();
    let line = match line.strip_prefix("Exception in thread \"") {
        Some(rest) => rest.split_once("\" ").map_or(rest, |(_, r)| r),
        None => line,
    };
    split_type(line)
}

/// Java: the last `Caused by:` names the bug; a message may span lines up to the first
/// frame.
fn java(lines: &[&str]) -> Root {
    // Sections: the first header and each `Caused by:`, with the lines up to the next.
    let mut sections: Vec<(String, Vec<&str>)> = Vec::new();
    for line in lines {
        let trimmed = line.trim();
        if let Some(cause) = trimmed.strip_prefix("Caused by: ") {
            sections.push((cause.to_owned(), Vec::new()));
        } else if let Some(frame) = java_frame(line) {
            if let Some((_, frames)) = sections.last_mut() {
                frames.push(frame);
            }
        } else if trimmed.starts_with("Suppressed: ") || trimmed.starts_with("... ") {
            continue;
        } else if sections.is_empty() {
            if !trimmed.is_empty() {
                sections.push((trimmed.to_owned(), Vec::new()));
            }
        } else if let Some((header, frames)) = sections.last_mut() {
            if frames.is_empty() && !trimmed.is_empty() {
                header.push('\n');
                header.push_str(trimmed);
            }
        }
    }
    let Some((header, _)) = sections.last() else {
        return Root::default();
    };
    let (error_type, message) = head(header);
    // The root's own frames first, then those of the exceptions wrapping it.
    let frame = first_app(sections.iter().rev().flat_map(|(_, f)| f.iter().copied()));
    Root {
        error_type,
        message,
        frame,
    }
}

/// .NET: the innermost of `Outer: a ---> Inner: b` names the bug; its frames come first.
fn dotnet(lines: &[&str]) -> Root {
    let header: Vec<&str> = lines
        .iter()
        .take_while(|l| frame_of(l).is_none())
        .map(|l| l.trim())
        .collect();
    let header = header.join("\n");
    // `--->` starts each inner exception, on the same line (.NET Framework) or the next.
    let innermost = header.rsplit("--->").next().unwrap_or_default().trim();
    let (error_type, message) = split_type(innermost);
    // The innermost exception's frames come first, up to `--- End of inner exception …`.
    let frame = first_app(lines.iter().filter_map(|l| frame_of(l)));
    Root {
        error_type,
        message,
        frame,
    }
}

/// Python: the first traceback of a chain is the cause (`raise … from …` prints it first);
/// its last line is the exception, its innermost application frame the top one.
fn python(lines: &[&str]) -> Root {
    let starts: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            l.trim_start()
                .starts_with("Traceback (most recent call last)")
        })
        .map(|(i, _)| i)
        .collect();
    let first = starts[0];
    let end = starts.get(1).copied().unwrap_or(lines.len());
    let block = &lines[first + 1..end];
    let frames: Vec<&str> = block
        .iter()
        .map(|l| l.trim())
        .filter(|l| l.starts_with("File \""))
        .collect();
    // The exception: the first line after the frames that is not indented (code lines and
    // carets are), and not the sentence that joins two tracebacks.
    let exception = block
        .iter()
        .filter(|l| !l.starts_with(' ') && !l.starts_with('\t') && !l.trim().is_empty())
        .find(|l| !l.starts_with("The above exception") && !l.starts_with("During handling"))
        .copied()
        .unwrap_or_default();
    let (error_type, message) = split_type(exception);
    let error_type = error_type.or_else(|| {
        let word = exception.trim();
        is_type(word).then(|| word.to_owned())
    });
    Root {
        message: if error_type.as_deref() == Some(exception.trim()) {
            String::new()
        } else {
            message
        },
        error_type,
        frame: first_app(frames.iter().rev().copied()),
    }
}

/// Node.js: `TypeError: msg` then `at` frames; a `[cause]:` names what it wraps.
fn node(lines: &[&str]) -> Root {
    // The line before the first frame: an uncaught error is printed after the source line
    // that threw it.
    let first_frame = lines
        .iter()
        .position(|l| frame_of(l).is_some())
        .unwrap_or(0);
    let mut header = lines[..first_frame]
        .iter()
        .rev()
        .find(|l| !l.trim().is_empty())
        .copied()
        .unwrap_or_default();
    let mut frames: Vec<&str> = Vec::new();
    for line in lines {
        let trimmed = line.trim().trim_start_matches('{').trim();
        if let Some(cause) = trimmed.strip_prefix("[cause]: ") {
            header = cause;
            frames.clear();
        } else if let Some(frame) = frame_of(line) {
            frames.push(frame);
        }
    }
    let (error_type, message) = split_type(header);
    Root {
        error_type,
        message,
        frame: first_app(frames),
    }
}

/// Go: `panic: msg`, then each goroutine's functions, each followed by its file line.
fn go(lines: &[&str]) -> Root {
    let message = lines
        .iter()
        .find_map(|l| l.strip_prefix("panic: "))
        .unwrap_or_default()
        .trim_end_matches(" [recovered]")
        .trim()
        .to_owned();
    let mut frames = Vec::new();
    let mut in_goroutine = false;
    for pair in lines.windows(2) {
        if pair[0].starts_with("goroutine ") {
            if in_goroutine {
                break;
            }
            in_goroutine = true;
            continue;
        }
        if in_goroutine && !pair[0].starts_with('\t') && pair[1].starts_with('\t') {
            let function = pair[0].trim();
            let file = pair[1].trim();
            let file = file.rsplit_once(" +0x").map_or(file, |(f, _)| f);
            frames.push(format!("{function} ({file})"));
        }
    }
    Root {
        error_type: Some("panic".into()),
        message,
        frame: first_app(frames.iter().map(String::as_str)),
    }
}

/// A PHP frame: `#0 /app/src/Handler.php(23): App\Handler->__invoke()`, `#3 {main}`.
fn php_frame(line: &str) -> Option<&str> {
    let rest = line.trim().strip_prefix('#')?;
    let (n, frame) = rest.split_once(' ')?;
    (n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty() && frame != "{main}").then_some(frame)
}

/// PHP, as Symfony's `FlattenException::getAsString()` prints a chain: the root cause first
/// (`Class: message in /file.php:47`, `Stack trace:`, `#0 …` frames), then each wrapper after
/// `Next `.
fn php(lines: &[&str]) -> Root {
    let header = lines
        .iter()
        .map(|l| l.trim())
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    let (error_type, message) = split_type(header);
    // `… in /app/src/Handler.php:23`: where it was thrown, not part of the message.
    let message = match message.rsplit_once(" in ") {
        Some((text, at))
            if at
                .rsplit_once(':')
                .is_some_and(|(_, n)| n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty()) =>
        {
            text.to_owned()
        }
        _ => message,
    };
    let root_frames = lines
        .iter()
        .take_while(|l| !l.trim_start().starts_with("Next "))
        .filter_map(|l| php_frame(l));
    Root {
        error_type,
        message,
        frame: first_app(root_frames),
    }
}

/// `/app/x.rb:3:in 'm': message (Type)` (backticks before Ruby 3.4): the location, the
/// message and the type.
fn ruby_head(line: &str) -> Option<(&str, &str, &str)> {
    let (location, rest) = line.split_once(": ")?;
    let (_, after_in) = location.split_once(":in ")?;
    if !after_in.starts_with(['`', '\'']) {
        return None;
    }
    let rest = rest.trim_end();
    let open = rest.rfind(" (")?;
    let kind = rest[open + 2..].strip_suffix(')')?;
    is_type(kind).then_some((location, &rest[..open], kind))
}

fn ruby(lines: &[&str]) -> Root {
    let (location, message, kind) = ruby_head(lines[0]).expect("checked by parse");
    let frames = std::iter::once(location).chain(
        lines[1..]
            .iter()
            .filter_map(|l| l.trim().strip_prefix("from ")),
    );
    Root {
        error_type: Some(kind.to_owned()),
        message: message.to_owned(),
        frame: first_app(frames),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_php_chain_names_its_root_and_its_frame() {
        let trace = "App\\Exception\\CustomerNotFound: no customer C-1007 in /app/src/Handler.php:23\n\
            Stack trace:\n\
            #0 /app/vendor/symfony/messenger/Middleware/HandleMessageMiddleware.php(152): App\\Handler->__invoke()\n\
            #1 /app/src/Handler.php(40): App\\Handler->load()\n\
            #2 {main}\n\n\
            Next App\\Exception\\InvoiceFailed: invoice INV-42 could not be sent in /app/src/Send.php:9\n\
            Stack trace:\n\
            #0 /app/src/Send.php(9): App\\Send->run()\n\
            #1 {main}";
        let (runtime, root) = parse(trace).unwrap();
        assert_eq!(runtime, Runtime::Php);
        assert_eq!(
            root.error_type.as_deref(),
            Some("App\\Exception\\CustomerNotFound")
        );
        assert_eq!(root.message, "no customer C-1007");
        assert_eq!(
            root.frame.as_deref(),
            Some("/app/src/Handler.php(40): App\\Handler->load()")
        );
    }

    #[test]
    fn types_are_told_from_prose() {
        for t in [
            "ValueError",
            "java.lang.IllegalStateException",
            "CustomerNotFoundException",
            "System.InvalidOperationException",
            "Error",
            "ActiveRecord::RecordNotFound",
            "KeyError",
        ] {
            assert!(is_type(t), "{t}");
        }
        for t in [
            "timeout",
            "Connection refused",
            "HTTP",
            "Invoice",
            "no customer",
        ] {
            assert!(!is_type(t), "{t}");
        }
        assert_eq!(
            split_type("Connection refused: localhost:5432"),
            (None, "Connection refused: localhost:5432".into())
        );
        assert_eq!(
            split_type("KeyError: 'vat_id'"),
            (Some("KeyError".into()), "'vat_id'".into())
        );
    }
}
