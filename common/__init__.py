"""What eval/ and train/ both use: metrics, simulated face attacks, the data folder and file helpers.

It imports neither package, so the dependencies run one way: common <- train <- eval.
"""
