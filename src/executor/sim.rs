//! A deterministic simulated model for tests, the visualizer and scale studies.
