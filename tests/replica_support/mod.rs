//! `pagoda serve --executor sim` as a child process on a loopback port, for the tests that
//! need a real process (signals) or several replicas.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pagoda::model::testing::TinyLlama;

use crate::server_support::request_with;

/// The tiny model (with an 8192-token context) written to `dir`, for the simulated
/// executor's tokenizer.
pub fn write_tiny_model(dir: &Path) {
    let mut model = TinyLlama::new(0);
    model.config.max_position_embeddings = 8192;
    model.write_hf_dir(dir).unwrap();
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running `pagoda serve`; killed when dropped.
pub struct Replica {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The process.
    pub child: Child,
}

impl Replica {
    /// Starts `pagoda serve --executor sim --model MODEL_DIR --served-model-name tiny` with
    /// `extra` arguments on a free port and waits until `/health` answers 200.
    pub fn start(model_dir: &Path, extra: &[&str]) -> Self {
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_pagoda"))
            .args(["serve", "--executor", "sim", "--served-model-name", "tiny", "--host", "127.0.0.1"])
            .arg("--model")
            .arg(model_dir)
            .args(["--port", &port.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut replica = Self { addr: SocketAddr::from(([127, 0, 0, 1], port)), child };
        replica.wait_healthy();
        replica
    }

    fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("pagoda serve exited early with {status}");
            }
            if TcpStream::connect(self.addr).is_ok() && self.get("/health").0 == 200 {
                return;
            }
            assert!(Instant::now() < deadline, "pagoda serve never became healthy");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// GETs `path`: (status, body).
    pub fn get(&self, path: &str) -> (u16, String) {
        request_with(self.addr, "GET", path, None, &[])
    }

    /// POSTs JSON: (status, body).
    pub fn post(&self, path: &str, body: &str) -> (u16, String) {
        request_with(self.addr, "POST", path, Some(body), &[])
    }

    /// The value of the series whose line starts with `series` in `/metrics`.
    pub fn metric(&self, series: &str) -> f64 {
        let (_, text) = self.get("/metrics");
        text.lines()
            .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("no series {series}"))
            .parse()
            .unwrap()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
