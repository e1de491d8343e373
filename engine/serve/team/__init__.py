"""A team's engine: replicas on Ray Serve behind one URL, its front door, and its client."""
