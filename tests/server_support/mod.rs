//! A pagoda server on a loopback port and a plain `TcpStream` HTTP/1.1 client for tests.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pagoda::Engine;
use pagoda::server::limits::ServerLimits;
use pagoda::server::{ServerOptions, ServerState, router, serve};
use serde_json::Value;

/// The model name the test servers serve.
pub const MODEL: &str = "tiny";

/// A running server; dropping it stops the runtime.
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its shared state.
    pub state: Arc<ServerState>,
    runtime: tokio::runtime::Runtime,
}

impl TestServer {
    /// Serves `engine` on 127.0.0.1 at a free port.
    pub fn start(engine: Engine) -> Self {
        Self::start_with(engine, ServerOptions::default())
    }

    /// Serves `engine` with `options` on 127.0.0.1 at a free port.
    pub fn start_with(engine: Engine, options: ServerOptions) -> Self {
        Self::start_configured(engine, options, ServerLimits::default())
    }

    /// Serves `engine` with request `limits` on 127.0.0.1 at a free port.
    pub fn start_with_limits(engine: Engine, limits: ServerLimits) -> Self {
        Self::start_configured(engine, ServerOptions::default(), limits)
    }

    fn start_configured(engine: Engine, options: ServerOptions, limits: ServerLimits) -> Self {
        let runtime =
            tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let state = runtime.block_on(ServerState::with_options(engine, MODEL, options)).unwrap();
        let state = Arc::new(state.with_limits(limits));
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        runtime.spawn(serve(listener, router(Arc::clone(&state)), std::future::pending()));
        Self { addr, state, runtime }
    }

    /// Sends one request and reads the whole response: (status, body).
    pub fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
        let mut stream = self.send(method, path, body);
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).unwrap();
        parse_response(&raw)
    }

    /// POSTs JSON and parses the JSON answer.
    pub fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        let (status, text) = self.request("POST", path, Some(&body.to_string()));
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// POSTs a streaming request and returns every SSE `data:` payload.
    pub fn post_stream(&self, path: &str, body: &Value) -> (u16, Vec<String>) {
        let (status, text) = self.request("POST", path, Some(&body.to_string()));
        (status, sse_data(&text))
    }

    /// Opens a connection and sends a request, leaving the response unread.
    pub fn send(&self, method: &str, path: &str, body: Option<&str>) -> TcpStream {
        send_request(self.addr, method, path, body, &[])
    }

    /// Runs `future` on the server's runtime.
    pub fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// The value of one Prometheus series line `name` (labels included) from `/metrics`.
    pub fn metric(&self, series: &str) -> f64 {
        let (status, text) = self.request("GET", "/metrics", None);
        assert_eq!(status, 200);
        text.lines()
            .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("no series {series} in\n{text}"))
            .parse()
            .unwrap()
    }

    /// Polls `/metrics` until `series` equals `value` (panics after 20 s).
    pub fn wait_for_metric(&self, series: &str, value: f64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.metric(series) != value {
            assert!(Instant::now() < deadline, "{series} never reached {value}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Opens a connection to `addr` and sends a request with `headers` (`"Name: value"`),
/// leaving the response unread.
pub fn send_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[&str],
) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    let body = body.unwrap_or("");
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    stream
}

/// Sends one request with `headers` and reads the whole response: (status, body).
pub fn request_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    headers: &[&str],
) -> (u16, String) {
    let mut stream = send_request(addr, method, path, body, headers);
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    parse_response(&raw)
}

/// A series name with the test model label, e.g. `series("num_requests_running", "")`.
pub fn series(name: &str, extra_labels: &str) -> String {
    format!("pagoda:{name}{{{extra_labels}model_name=\"{MODEL}\",engine=\"0\"}}")
}

/// Splits a raw HTTP/1.1 response into status and (de-chunked) body.
pub fn parse_response(raw: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
    (status, if chunked { dechunk(body) } else { body.to_owned() })
}

/// Decodes a chunked transfer-encoded body.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

/// The `data:` payloads of an SSE body.
pub fn sse_data(body: &str) -> Vec<String> {
    body.lines().filter_map(|line| line.strip_prefix("data: ")).map(str::to_owned).collect()
}

/// Reads a streaming response line by line until a `data:` line contains `needle`.
pub fn read_until_data_contains(stream: TcpStream, needle: &str) -> BufReader<TcpStream> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "stream ended before {needle:?}");
        if line.starts_with("data: ") && line.contains(needle) {
            return reader;
        }
    }
}
