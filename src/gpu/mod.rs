//! wgpu plumbing: device, buffers and typed kernel launches.
