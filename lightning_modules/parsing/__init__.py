"""English constituency parsing cast as translation (the paper's section 6.3, Table 4): trees and their scoring."""
