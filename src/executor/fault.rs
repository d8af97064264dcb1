//! Fault injection: a plan of steps at which an executor fails, for testing the engine's
//! failure paths (every in-flight request ends with an error, blocks are freed, the engine
//! goes on after a transient failure and stops after a lost device).

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::ExecutorError;

/// How an injected step failure looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// The step fails; the device still works.
    Transient,
    /// The device is lost: this step and every later one fail.
    DeviceLost,
}

/// One injected failure: the `step`-th call to `execute` (1-based) fails with `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fault {
    /// The 1-based `execute` call that fails.
    pub step: u64,
    /// How it fails.
    pub kind: FaultKind,
}

/// A fault written as `STEP:transient` or `STEP:device-lost` does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad fault {0:?}: expected STEP:transient or STEP:device-lost with STEP >= 1")]
pub struct FaultParseError(pub String);

impl FromStr for Fault {
    type Err = FaultParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || FaultParseError(text.to_owned());
        let (step, kind) = text.split_once(':').ok_or_else(bad)?;
        let step: u64 = step.trim().parse().map_err(|_| bad())?;
        let kind = match kind.trim() {
            "transient" => FaultKind::Transient,
            "device-lost" => FaultKind::DeviceLost,
            _ => return Err(bad()),
        };
        if step == 0 {
            return Err(bad());
        }
        Ok(Self { step, kind })
    }
}

/// Counts `execute` calls and says when one must fail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultPlan {
    faults: Vec<Fault>,
    steps: u64,
    lost: bool,
}

impl FaultPlan {
    /// A plan that fails at each of `faults`.
    pub fn new(faults: impl IntoIterator<Item = Fault>) -> Self {
        Self { faults: faults.into_iter().collect(), steps: 0, lost: false }
    }

    /// True when no fault is planned.
    pub fn is_empty(&self) -> bool {
        self.faults.is_empty()
    }

    /// Counts one `execute` call; the fault planned for it, if any.
    pub fn next_fault(&mut self) -> Option<FaultKind> {
        self.steps += 1;
        self.faults.iter().find(|fault| fault.step == self.steps).map(|fault| fault.kind)
    }

    /// Counts one `execute` call; the error it must fail with, if any. Once the device
    /// is lost every later call fails too.
    pub fn next_step(&mut self) -> Result<(), ExecutorError> {
        let fault = self.next_fault();
        let step = self.steps;
        if self.lost {
            return Err(ExecutorError::DeviceLost(format!(
                "injected at an earlier step; step {step} refused"
            )));
        }
        match fault {
            Some(FaultKind::Transient) => {
                Err(ExecutorError::Device(format!("injected failure at step {step}")))
            }
            Some(FaultKind::DeviceLost) => {
                self.lost = true;
                Err(ExecutorError::DeviceLost(format!("injected at step {step}")))
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_fires_at_the_named_steps() {
        let transient: Fault = "2:transient".parse().unwrap();
        let lost: Fault = "4:device-lost".parse().unwrap();
        assert_eq!(lost, Fault { step: 4, kind: FaultKind::DeviceLost });
        for bad in ["0:transient", "2", "x:transient", "2:melted"] {
            assert_eq!(bad.parse::<Fault>(), Err(FaultParseError(bad.into())));
        }
        let mut plan = FaultPlan::new([transient, lost]);
        let results: Vec<_> = (0..5).map(|_| plan.next_step()).collect();
        assert!(results[0].is_ok() && results[2].is_ok());
        assert!(matches!(results[1], Err(ExecutorError::Device(_))));
        assert!(results[3].as_ref().is_err_and(ExecutorError::is_device_lost));
        assert!(results[4].as_ref().is_err_and(ExecutorError::is_device_lost));
    }
}
