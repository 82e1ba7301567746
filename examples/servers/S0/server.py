"""S0 as a submission: the package's starter server (infbench.serving.starter), launched from this directory."""

from infbench.serving.starter import main

if __name__ == "__main__":
    main()
