"""`toolsift eval`: retrieval quality of the served API on labelled tool-retrieval datasets.

dataset (read and check), metrics (recall@k, nDCG, MRR), baselines (in-process bm25s and
brute-force cosine), stack (the embedded servers), runner (load, wait, select), report.
"""
