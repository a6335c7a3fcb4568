"""The command line: ``python -m train.antispoof_data [--cache DIR] [--workers 2] [--fresh]``."""

from train.antispoof_data.builder import main

if __name__ == "__main__":
    main()
