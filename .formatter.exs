[
  inputs: ["{mix,.formatter}.exs", "{config,lib,dev,test,examples}/**/*.{ex,exs}"]
]
