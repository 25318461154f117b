//! The log a job reports: what the agent did and the package manager printed, of which the
//! service keeps the last 64 KiB, so the agent keeps no more.

use protocol::wire::MAX_LOG_BYTES;

/// Text of which only the last [`MAX_LOG_BYTES`] bytes are kept.
#[derive(Debug, Default, Clone)]
pub struct Tail {
    text: String,
    cut: bool,
}

impl Tail {
    pub fn new() -> Tail {
        Tail::default()
    }

    /// Adds a line (a newline is added).
    pub fn line(&mut self, line: impl AsRef<str>) {
        self.push(line.as_ref());
        self.push("\n");
    }

    pub fn push(&mut self, text: &str) {
        self.text.push_str(text);
        // Cut at twice the bound, so that adding line after line does not move the text on
        // every line.
        if self.text.len() > 2 * MAX_LOG_BYTES {
            self.trim();
        }
    }

    fn trim(&mut self) {
        if self.text.len() <= MAX_LOG_BYTES {
            return;
        }
        let mut start = self.text.len() - MAX_LOG_BYTES;
        while !self.text.is_char_boundary(start) {
            start += 1;
        }
        self.text.drain(..start);
        self.cut = true;
    }

    /// The last [`MAX_LOG_BYTES`] bytes at most.
    pub fn into_string(mut self) -> String {
        self.trim();
        self.text
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether anything was dropped from the front.
    pub fn was_cut(&self) -> bool {
        self.cut || self.text.len() > MAX_LOG_BYTES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_64_kib_are_kept_on_a_character_boundary() {
        let mut tail = Tail::new();
        tail.line("first line, to be dropped");
        for i in 0..20_000 {
            tail.line(format!("Unpacking é{i} …"));
        }
        assert!(tail.was_cut());
        let text = tail.into_string();
        assert!(text.len() <= MAX_LOG_BYTES);
        assert!(text.len() > MAX_LOG_BYTES - 4);
        assert!(text.ends_with("Unpacking é19999 …\n"));
        assert!(!text.contains("first line"));
        let mut small = Tail::new();
        small.line("E: held");
        assert!(!small.was_cut());
        assert_eq!(small.into_string(), "E: held\n");
    }
}
