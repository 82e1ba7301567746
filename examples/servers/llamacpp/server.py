"""The llama.cpp engine as a submission: infbench.serving.llamacpp_server, launched from this directory."""

from infbench.serving.llamacpp_server import main

if __name__ == "__main__":
    main()
