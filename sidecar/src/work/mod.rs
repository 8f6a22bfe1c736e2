//! The work a run does, above both the runs queue and the session service:
//! a prompt turn of a session (`turns`: the turn entry the doors call, and
//! the executor that works a claimed turn through the session service), a
//! QuickJS script (`script`), and the children a run delegates (`delegate`:
//! they start as sessions and runs, and their results come back to their
//! parent). `runs` knows none of these; it holds the queue, the
//! [`Executor`](crate::runs::Executor) and
//! [`Resolver`](crate::runs::Resolver) traits these implement, and the run
//! rows the session service writes inside its own transactions.

pub mod delegate;
mod error;
mod script;
mod turns;

pub use delegate::{ChildSpec, Delegation, Refusal, Started};
pub use error::TurnError;
pub use script::{ScriptExecutor, ScriptTools};
pub use turns::{TurnAnswer, TurnExecutor, TurnOwner, TurnRequest, Turns, WhenBusy};
