"""The shipped scenarios, installed as package data: the demo, examples, and the evaluation suite (eval/)."""
