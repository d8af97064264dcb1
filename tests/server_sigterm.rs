//! SIGTERM drains `pagoda serve`: during 16 streaming requests, `/health` turns 503 and a
//! new request gets 503; short requests complete, requests that cannot finish before
//! `--shutdown-timeout` end with an error chunk, and the process exits 0.
#![cfg(all(feature = "server", unix))]

mod replica_support;
mod server_support;

use std::io::Read;

use replica_support::{Replica, write_tiny_model};
use serde_json::{Value, json};
use server_support::{read_until_data_contains, send_request, sse_data};

#[test]
fn sigterm_drains_streams_refuses_new_requests_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_model(dir.path());
    // Every simulated step sleeps at least 4 ms, so 2000 tokens take at least 8 s: the
    // long requests cannot finish within the 2 s deadline; the short ones need 8 steps.
    let mut replica = Replica::start(dir.path(), &["--sim-realtime", "--shutdown-timeout", "2"]);
    let streams: Vec<_> = (0..16)
        .map(|index| {
            let max_tokens = if index % 2 == 0 { 8 } else { 2000 };
            let body = json!({
                "model": "tiny", "prompt": format!("request {index}"), "max_tokens": max_tokens,
                "ignore_eos": true, "stream": true,
            });
            let stream = send_request(replica.addr, "POST", "/v1/completions", Some(&body.to_string()), &[]);
            (max_tokens, read_until_data_contains(stream, "\"text\""))
        })
        .collect();
    assert_eq!(unsafe { libc::kill(replica.child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    while replica.get("/health").0 != 503 {
        std::thread::yield_now();
    }
    let (status, body) =
        replica.post("/v1/completions", &json!({"prompt": "late", "max_tokens": 2}).to_string());
    assert_eq!(status, 503);
    let error: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["code"], 503);

    let (mut completed, mut cut) = (0, 0);
    for (max_tokens, mut reader) in streams {
        let mut rest = String::new();
        reader.read_to_string(&mut rest).unwrap();
        let chunks = sse_data(&rest);
        assert_eq!(chunks.last().map(String::as_str), Some("[DONE]"));
        let last: Value = serde_json::from_str(&chunks[chunks.len() - 2]).unwrap();
        if last["choices"][0]["finish_reason"] == "length" {
            completed += 1;
            assert_eq!(max_tokens, 8, "a 2000-token request cannot finish before the deadline");
        } else {
            assert_eq!(last["error"]["code"], 503, "{last}");
            cut += 1;
        }
    }
    assert_eq!(completed + cut, 16);
    assert!(cut >= 8, "the 8 long requests end with an error chunk");
    let status = replica.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}
