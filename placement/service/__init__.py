"""What the placement service answers, knowing nothing of protobuf: the engine facade and its results."""
