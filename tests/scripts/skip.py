"""Cannot run here and says so: `SKIP: <why>`, exit 0."""


def main() -> None:
    print("SKIP: needs CUDA")


if __name__ == "__main__":
    main()
