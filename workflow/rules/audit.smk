# Issue 15: documents drawn from the result files (the README's numbers block, figures/README.md)
# and the Part-2 abstract figure E2.7. Nothing here is typed: each reads the results it names.

# E2.7: the Part-2 abstract table: one row per integrated system, its outcome read from the Part-2 results.
rule E2_7:
    input:
        registered=registered_raw("E2.7"),
        results=lambda wc: part2_results(),
        code=code_of("E2_7_abstract"),
    output:
        result="results/E2_7.json",
        **figure("fig", "figures/E2_7_abstract"),
    params:
        question=question("E2.7"),
        settings=settings("E2.7"),
        claim_types={eid: e.get("claim_type") for eid, e in EXPERIMENTS.items() if eid.startswith("E2")},
    log:
        "logs/E2_7.log",
    conda:
        CONDA_ENV
    message:
        "E2.7: the Part-2 abstract figure, one row per integrated system, from the Part-2 results"
    script:
        "../scripts/E2_7_abstract.py"


# The README's results block (spliced into README.md by `steptime readme --write`; a test checks they agree).
rule readme_numbers:
    input:
        results=lambda wc: results_and_e2_7(),
        code=code_of("readme_numbers"),
    output:
        "results/README_numbers.md",
    params:
        registry=EXPERIMENTS,
    log:
        "logs/readme_numbers.log",
    conda:
        CONDA_ENV
    message:
        "Writing the README's numbers block from the result files"
    script:
        "../scripts/readme_numbers.py"


# figures/README.md: every figure with its experiment, script, inputs and caption.
rule figures_readme:
    input:
        results=lambda wc: results_and_e2_7(),
        code=code_of("figures_readme"),
    output:
        "figures/README.md",
    params:
        registry=EXPERIMENTS,
    log:
        "logs/figures_readme.log",
    conda:
        CONDA_ENV
    message:
        "Indexing every figure with its experiment, script and inputs"
    script:
        "../scripts/figures_readme.py"


# The notebooks are jupytext percent scripts (notebooks/*.py, the source); the paired .ipynb are generated.
rule notebook:
    input:
        src="notebooks/{name}.py",
        code=code_of("notebook"),
    output:
        "notebooks/{name}.ipynb",
    log:
        "logs/notebook/{name}.log",
    conda:
        CONDA_ENV
    message:
        "Pairing notebooks/{wildcards.name}.py as an .ipynb (jupytext, deterministic cell ids)"
    script:
        "../scripts/notebook.py"


NOTEBOOKS = [f"notebooks/{Path(p).stem}.ipynb" for p in sorted(glob.glob("notebooks/*.py"))]
# what rule all builds beside the experiments: the documents drawn from the results
DOC_TARGETS = ["results/README_numbers.md", "figures/README.md", "figures/PAPER.md", *NOTEBOOKS]


# figures/PAPER.md: every figure ID of the round-1 reports, with its file or why it cannot be drawn.
rule paper_index:
    input:
        results=lambda wc: results_and_e2_7(),
        mapping="config/paper_figures.yaml",
        code=code_of("paper_index"),
    output:
        "figures/PAPER.md",
    params:
        registry=EXPERIMENTS,
    log:
        "logs/paper_index.log",
    conda:
        CONDA_ENV
    message:
        "Writing figures/PAPER.md: every figure of the reports, its file or why it cannot be drawn"
    script:
        "../scripts/paper_index.py"


# `snakemake -j2 paper`: every figure of the round-1 reports our data allows (config/paper_figures.yaml's
# files whose experiment rule all builds) and figures/PAPER.md, which says why each other one is not drawn.
rule paper:
    input:
        lambda wc: sorted({m["file"] for m in PAPER_FIGURES.values() if m.get("file")} & set(all_targets()))
        + ["figures/PAPER.md"],


with open("config/paper_figures.yaml") as _fh:
    PAPER_FIGURES = yaml_load(_fh)
validate_file(PAPER_FIGURES, "../schemas/paper_figures.schema.yaml", "config/paper_figures.yaml")
PAPER_FIGURES = PAPER_FIGURES["figures"]
