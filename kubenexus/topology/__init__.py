"""The pure topology model and its codecs, shared by the agent and the placement service."""
