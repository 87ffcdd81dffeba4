// Stands in for another fmt (LibTorch ships one) first on the include path: ascan's public
// headers must not include fmt (Packaging.HeadersWithoutFmt).
#error "an ascan public header included <fmt/format.h>"
