//! A real SMTP server on loopback that keeps every message it receives, so tests can read the
//! emails the worker delivered over a real SMTP conversation.

use std::{sync::Arc, time::Duration};

use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
    sync::{Mutex, Notify},
};

/// One delivered message.
#[derive(Clone, Debug)]
pub struct ReceivedEmail {
    pub mail_from: String,
    pub rcpt_to: Vec<String>,
    /// The raw message (headers and body), dot-unstuffed.
    pub data: String,
}

impl ReceivedEmail {
    /// The value of a header (first occurrence), unfolded.
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.data.split("\r\n\r\n").next()?;
        let mut lines = head.split("\r\n").peekable();
        while let Some(line) = lines.next() {
            let (key, value) = line.split_once(':')?;
            if key.eq_ignore_ascii_case(name) {
                let mut value = value.trim().to_owned();
                while let Some(next) = lines.peek() {
                    if next.starts_with(' ') || next.starts_with('\t') {
                        value.push(' ');
                        value.push_str(next.trim());
                        lines.next();
                    } else {
                        break;
                    }
                }
                return Some(value);
            }
        }
        None
    }

    /// The message with quoted-printable soft line breaks removed, for searching the body.
    pub fn text(&self) -> String {
        self.data.replace("=\r\n", "").replace("=3D", "=")
    }
}

#[derive(Clone)]
pub struct SmtpSink {
    pub port: u16,
    messages: Arc<Mutex<Vec<ReceivedEmail>>>,
    arrived: Arc<Notify>,
    /// The first message to this address is read but never answered (a server that hangs),
    /// so the sender stays mid-delivery.
    stall_first_to: Arc<std::sync::Mutex<Option<String>>>,
    stalled: Arc<Notify>,
    /// Lets the stalled message through (answered and kept, as any other).
    released: Arc<Notify>,
}

impl SmtpSink {
    pub async fn start() -> SmtpSink {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the SMTP sink");
        let port = listener.local_addr().expect("local addr").port();
        let sink = SmtpSink {
            port,
            messages: Arc::default(),
            arrived: Arc::default(),
            stall_first_to: Arc::default(),
            stalled: Arc::default(),
            released: Arc::default(),
        };
        let accepting = sink.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let session = accepting.clone();
                tokio::spawn(async move {
                    let _ = session.converse(stream).await;
                });
            }
        });
        sink
    }

    /// Makes the first message to `address` hang after its DATA, never acknowledged.
    pub fn stall_first_message_to(&self, address: &str) {
        if let Ok(mut stall) = self.stall_first_to.lock() {
            *stall = Some(address.to_owned());
        }
    }

    /// Answers the stalled message at last (or the next one stalled, if none is yet): it is
    /// kept like any other.
    pub fn release_stall(&self) {
        self.released.notify_one();
    }

    /// Waits until a message was stalled, or panics after `timeout`.
    pub async fn wait_for_stall(&self, timeout: Duration) {
        if tokio::time::timeout(timeout, self.stalled.notified())
            .await
            .is_err()
        {
            panic!("no message stalled within {timeout:?}");
        }
    }

    pub fn url(&self) -> String {
        format!("smtp://127.0.0.1:{}", self.port)
    }

    pub async fn messages(&self) -> Vec<ReceivedEmail> {
        self.messages.lock().await.clone()
    }

    /// Waits until at least `count` messages arrived, or panics after `timeout`.
    pub async fn wait_for(&self, count: usize, timeout: Duration) -> Vec<ReceivedEmail> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.arrived.notified();
            {
                let messages = self.messages.lock().await;
                if messages.len() >= count {
                    return messages.clone();
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let have = self.messages.lock().await.len();
                panic!("expected {count} emails within {timeout:?}, the sink has {have}");
            }
        }
    }

    /// Waits for the first message to `address`.
    pub async fn wait_for_message_to(&self, address: &str, timeout: Duration) -> ReceivedEmail {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.arrived.notified();
            if let Some(found) = self
                .messages
                .lock()
                .await
                .iter()
                .rev()
                .find(|m| m.rcpt_to.iter().any(|r| r.eq_ignore_ascii_case(address)))
            {
                return found.clone();
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("no email to {address} within {timeout:?}");
            }
        }
    }

    async fn converse(&self, stream: TcpStream) -> std::io::Result<()> {
        let (read, mut write) = stream.into_split();
        let mut reader = BufReader::new(read);
        write.write_all(b"220 sink.test ESMTP\r\n").await?;
        let mut mail_from = String::new();
        let mut rcpt_to = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            let command = line.trim_end().to_owned();
            let upper = command.to_ascii_uppercase();
            if upper.starts_with("EHLO") || upper.starts_with("HELO") {
                write
                    .write_all(b"250-sink.test\r\n250-8BITMIME\r\n250 SMTPUTF8\r\n")
                    .await?;
            } else if upper.starts_with("MAIL FROM:") {
                mail_from = address_of(&command["MAIL FROM:".len()..]);
                rcpt_to.clear();
                write.write_all(b"250 OK\r\n").await?;
            } else if upper.starts_with("RCPT TO:") {
                rcpt_to.push(address_of(&command["RCPT TO:".len()..]));
                write.write_all(b"250 OK\r\n").await?;
            } else if upper == "DATA" {
                write.write_all(b"354 go ahead\r\n").await?;
                let mut data = String::new();
                loop {
                    line.clear();
                    if reader.read_line(&mut line).await? == 0 {
                        return Ok(());
                    }
                    if line == ".\r\n" || line == ".\n" {
                        break;
                    }
                    let unstuffed = line.strip_prefix('.').unwrap_or(&line);
                    data.push_str(unstuffed);
                }
                let stall = match self.stall_first_to.lock() {
                    Ok(mut stall) => {
                        let hit = stall
                            .as_deref()
                            .is_some_and(|a| rcpt_to.iter().any(|r| r.eq_ignore_ascii_case(a)));
                        if hit {
                            *stall = None;
                        }
                        hit
                    }
                    Err(_) => false,
                };
                if stall {
                    self.stalled.notify_one();
                    // Hold the connection open without an answer until the test releases the
                    // message or the sender goes away.
                    let mut rest = String::new();
                    let gone = async {
                        while reader.read_line(&mut rest).await? > 0 {
                            rest.clear();
                        }
                        std::io::Result::Ok(())
                    };
                    tokio::select! {
                        () = self.released.notified() => {}
                        outcome = gone => return outcome,
                    }
                }
                self.messages.lock().await.push(ReceivedEmail {
                    mail_from: mail_from.clone(),
                    rcpt_to: std::mem::take(&mut rcpt_to),
                    data,
                });
                self.arrived.notify_waiters();
                write.write_all(b"250 OK queued\r\n").await?;
            } else if upper == "RSET" || upper == "NOOP" {
                write.write_all(b"250 OK\r\n").await?;
            } else if upper == "QUIT" {
                write.write_all(b"221 bye\r\n").await?;
                return Ok(());
            } else {
                write.write_all(b"502 not implemented\r\n").await?;
            }
        }
    }
}

fn address_of(text: &str) -> String {
    let text = text.trim();
    let inner = text
        .split_once('<')
        .and_then(|(_, rest)| rest.split_once('>'))
        .map(|(address, _)| address)
        .unwrap_or(text);
    inner.trim().to_owned()
}
