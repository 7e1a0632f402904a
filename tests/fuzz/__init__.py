"""A structure-aware fuzzer of the broker's wire protocol: Hypothesis strategies for requests
built from kio's schemas, mutated frames, mutated record batches and group members'
sessions (strategies.py), and the harness that sends them to a broker process and checks
it (harness.py). test_fuzz.py runs a few thousand cases; scripts/fuzz.py runs the same
strategies for as long as asked."""
