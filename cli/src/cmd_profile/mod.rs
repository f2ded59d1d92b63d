//! `gpumon profile`: runs one training command on this node and writes a
//! report of what it used (JSON, HTML). The command itself is wired in by
//! the lead's branch; this file only declares the report's parts.

#![allow(dead_code)]

pub mod html;
pub mod report;
