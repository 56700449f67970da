"""Host memory tier, copy streams and layer schedules (see issue: offloading)."""
